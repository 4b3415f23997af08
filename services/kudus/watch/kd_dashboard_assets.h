/*  kd_dashboard_assets: the dashboard's page and its vendored chart
    library, embedded at build time by cmake/embed.cmake.
*/
#ifndef KD_DASHBOARD_ASSETS_H_INCLUDED
#define KD_DASHBOARD_ASSETS_H_INCLUDED

#include <stddef.h>

typedef struct {
    const char *url;                //  "/", "/uPlot.iife.min.js", ...
    const char *type;               //  its Content-Type
    const unsigned char *data;      //  the file's bytes
    size_t size;
} kd_asset_t;

//  Ends with an entry whose url is NULL.
extern const kd_asset_t kd_dashboard_assets [];

#endif
