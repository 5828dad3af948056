/* A pass plugin that registers nothing: built below against a stand-in for another MLIR, with
 * no MLIR at all, or with another plugin API version, to check that fxmlir refuses each. */
#include <stdint.h>

#ifndef API_VERSION
#define API_VERSION 1
#endif

struct PassPluginInfo {
  uint32_t api_version;
  const char *name;
  const char *version;
  void (*register_passes)(void);
};

static void register_passes(void) {}

__attribute__((visibility("default"))) struct PassPluginInfo mlirGetPassPluginInfo(void) {
  struct PassPluginInfo info = {API_VERSION, "test", "0", register_passes};
  return info;
}
