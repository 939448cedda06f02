"""cffi build of `eventstore._sign_batch` (run by setuptools through setup.py's cffi_modules)."""

from pathlib import Path

from cffi import FFI

ffibuilder = FFI()
ffibuilder.cdef(
    """
    typedef struct sign_job sign_job;
    int sign_batch(uintptr_t crypto_sign, const unsigned char *secret_key,
                   const unsigned char *messages, const size_t *offsets, size_t count,
                   unsigned char *signatures);
    sign_job *sign_start(uintptr_t crypto_sign, const unsigned char *secret_key,
                         const unsigned char *messages, const size_t *offsets, size_t count,
                         unsigned char *signatures);
    int sign_finish(sign_job *job);
    """
)
ffibuilder.set_source(
    "eventstore._sign_batch",
    (Path(__file__).parent / "sign_batch.c").read_text(),
    extra_compile_args=["-O2"],
    libraries=["pthread"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
