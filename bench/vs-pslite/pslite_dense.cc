// Dense push+pull of one key of S floats through ps-lite, the shape that
// `kudus bench pushpull --shards 1 --inflight 1` times.  Built against a
// ps-lite tree by bench/vs-pslite/build.sh; started by run.sh as
// scheduler, one server and one worker (ps-lite's DMLC_* variables).
//
// Each op is a ZPush and a ZPull sent back to back, then both waited on:
// one request in flight, S out and S back, as Kudus's push+pull sends its
// PUSH and PULL together.  The server keeps the pushed array (zero copy,
// as a Kudus shard stages a push) and answers a pull with its model array
// (zero copy, as a shard's fp32 pull sends its buffer).  ZPull copies the
// reply into the caller's array, as a user of ps-lite gets it.
//
//   pslite_dense SIZES SECONDS    sizes in bytes, comma-separated; K and M
//                                 suffixes; each timed for SECONDS
// The worker prints one JSON object per size on stdout.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>
#include "ps/ps.h"

using namespace ps;

namespace {

// One key per size: a pull carries only its key, so the server sizes a
// key's model from the first push to it (every op pushes first, and one
// connection delivers in order).
struct Entry {
  SArray<float> model;    // answered to pulls
  SArray<float> staged;   // the last push, kept as a shard keeps it
};

std::unordered_map<Key, Entry> *g_store = nullptr;

void Handle(const KVMeta &meta, const KVPairs<float> &data, KVServer<float> *server) {
  KVPairs<float> res;
  Entry &e = (*g_store)[data.keys.empty() ? 0 : data.keys[0]];
  if (meta.push) {
    if (e.model.size() != data.vals.size())
      e.model = SArray<float>(data.vals.size(), 1.0f);
    e.staged = data.vals;
  } else {
    res.keys = data.keys;
    res.vals = e.model;
  }
  server->Response(meta, res);
}

std::vector<size_t> ParseSizes(const char *text) {
  std::vector<size_t> sizes;
  std::string s(text);
  size_t start = 0;
  while (start < s.size()) {
    size_t end = s.find(',', start);
    if (end == std::string::npos) end = s.size();
    std::string item = s.substr(start, end - start);
    char *rest = nullptr;
    double v = strtod(item.c_str(), &rest);
    if (rest && (*rest == 'K' || *rest == 'k')) v *= 1024;
    else if (rest && (*rest == 'M' || *rest == 'm')) v *= 1024 * 1024;
    if (v >= 4) sizes.push_back(static_cast<size_t>(v));
    start = end + 1;
  }
  return sizes;
}

}  // namespace

int main(int argc, char *argv[]) {
  if (argc < 3) {
    fprintf(stderr, "usage: pslite_dense SIZES SECONDS\n");
    return 2;
  }
  std::vector<size_t> sizes = ParseSizes(argv[1]);
  double seconds = atof(argv[2]);
  if (sizes.empty() || seconds <= 0) {
    fprintf(stderr, "pslite_dense: bad sizes or seconds\n");
    return 2;
  }
  Start(0);
  KVServer<float> *server = nullptr;
  if (IsServer()) {
    g_store = new std::unordered_map<Key, Entry>;
    server = new KVServer<float>(0);
    server->set_request_handle(Handle);
  }
  if (IsWorker()) {
    KVWorker<float> kv(0, 0);
    for (size_t bytes : sizes) {
      SArray<Key> keys(1, static_cast<Key>(bytes));
      SArray<float> vals(bytes / sizeof(float), 0.5f);
      SArray<float> out;
      auto op = [&]() {
        out.clear();
        int a = kv.ZPush(keys, vals);
        int b = kv.ZPull(keys, &out);
        kv.Wait(a);
        kv.Wait(b);
      };
      for (int i = 0; i < 3; ++i) op();  // warm-up: connections, buffers
      if (out.size() != vals.size()) {
        fprintf(stderr, "pslite_dense: pulled %zu floats, expected %zu\n", out.size(), vals.size());
        return 1;
      }
      auto t0 = std::chrono::steady_clock::now();
      long ops = 0;
      double elapsed = 0;
      do {
        op();
        ++ops;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } while (elapsed < seconds || ops < 8);
      printf("{\"system\": \"ps-lite\", \"size_bytes\": %zu, \"ops\": %ld, \"seconds\": %.4f, "
             "\"pushpull_gbps\": %.4f, \"op_us\": %.1f}\n",
             bytes, ops, elapsed, 2.0 * bytes * ops / elapsed / 1e9, elapsed * 1e6 / ops);
      fflush(stdout);
    }
  }
  Finalize(0, true);
  delete server;
  return 0;
}
