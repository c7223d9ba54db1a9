/* SPDX-License-Identifier: Apache-2.0 */
/* A received message made contiguous (flat.h). */
#include <stdlib.h>
#include <string.h>

#include "cpr_common.h"
#include "flat.h"

cpr_status cpri_rpc_flatten(grpc_byte_buffer *bb, grpc_byte_buffer_reader *reader,
                            cpri_rpc_flat *f, const uint8_t **msg, size_t *len,
                            int *in_place)
{
    static const uint8_t empty[1];
    *in_place = 0;
    if (!grpc_byte_buffer_reader_init(reader, bb)) /* it also undoes any compression */
        return cpr_fail(CPR_INTERNAL, "cannot read a received message");
    grpc_slice *s, *first = NULL;
    size_t n = 0, pieces = 0;
    while (grpc_byte_buffer_reader_peek(reader, &s)) { /* slices owned by the reader */
        first = pieces++ ? first : s;
        n += GRPC_SLICE_LENGTH(*s);
    }
    if (pieces == 1) {
        *msg = GRPC_SLICE_START_PTR(*first);
        *len = n;
        *in_place = 1;
        return CPR_OK;
    }
    grpc_byte_buffer_reader_destroy(reader);
    if (n > f->cap) {
        size_t cap = n > 2 * f->cap ? n : 2 * f->cap;
        uint8_t *b = realloc(f->buf, cap);
        if (!b)
            return cpr_fail(CPR_NO_MEMORY, "out of memory for a %zu-byte message", n);
        f->buf = b;
        f->cap = cap;
    }
    size_t at = 0;
    grpc_byte_buffer_reader_init(reader, bb);
    while (grpc_byte_buffer_reader_peek(reader, &s)) {
        memcpy(f->buf + at, GRPC_SLICE_START_PTR(*s), GRPC_SLICE_LENGTH(*s));
        at += GRPC_SLICE_LENGTH(*s);
    }
    grpc_byte_buffer_reader_destroy(reader);
    *msg = f->buf ? f->buf : empty;
    *len = at;
    return CPR_OK;
}
