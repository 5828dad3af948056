/* What both examples share: reading files, and failing with fxmlir's message. */
#ifndef FXMLIR_EXAMPLE_COMMON_H
#define FXMLIR_EXAMPLE_COMMON_H

#include <stddef.h>

#include "fxmlir.h"

/* The contents of `path` (NUL-terminated; `length` without the NUL), or exits. */
char *read_file(const char *path, size_t *length);
/* Exits with fxmlir's last error unless `status` is FXMLIR_OK. */
void check(fxmlir_status status, const char *what);
/* Exits unless the library implements the ABI this program was built against. */
void check_abi(void);

#endif
