"""cffi build of `eventstore._sign_batch` (run by setuptools through setup.py's cffi_modules).

`optional=True`: a failed compile (no compiler, no Python headers) is a warning, not a failed
install; the store then signs through PyNaCl (eventstore/signing.py).
"""

from pathlib import Path

from cffi import FFI

ffibuilder = FFI()
ffibuilder.cdef(
    """
    typedef struct shared_signer shared_signer;
    int sign_batch(uintptr_t crypto_sign, const unsigned char *secret_key,
                   const unsigned char *messages, const size_t *offsets, size_t count,
                   unsigned char *signatures);
    int verify_batch(uintptr_t crypto_sign_open, const unsigned char *messages,
                     const size_t *offsets, const unsigned char *signatures,
                     const unsigned char *public_keys, size_t count, unsigned char *ok);
    shared_signer *shared_new(uintptr_t crypto_sign, const unsigned char *secret_key);
    int shared_begin(shared_signer *s, size_t count, size_t slot_bytes, int helped);
    int shared_add(shared_signer *s, const unsigned char *message, size_t length);
    long shared_finish(shared_signer *s, unsigned char *signatures);
    void shared_free(shared_signer *s);
    """
)
ffibuilder.set_source(
    "eventstore._sign_batch",
    (Path(__file__).parent / "sign_batch.c").read_text(),
    extra_compile_args=["-O2", "-std=c11"],
    libraries=["pthread"],
    optional=True,
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
