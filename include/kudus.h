/*  kudus.h: umbrella header of the Kudus common library.
*/
#ifndef KUDUS_H_INCLUDED
#define KUDUS_H_INCLUDED

#define KUDUS_VERSION_MAJOR 0
#define KUDUS_VERSION_MINOR 1
#define KUDUS_VERSION_PATCH 0
#define KUDUS_VERSION_STRING "0.1.0"

#include <czmq.h>
#include "kd_log.h"
#include "kd_util.h"
#include "kd_config.h"
#include "kd_msg.h"
#include "kd_range.h"
#include "kd_dataset.h"
#include "kd_model.h"
#include "kd_controller.h"
#include "kd_peer.h"
#include "kd_curve.h"
#include "kd_service.h"
#include "kd_speed.h"

#endif
