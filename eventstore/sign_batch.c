/* Sign batches of messages with libsodium's crypto_sign, without the GIL.
 *
 * Called through cffi, which releases the GIL for each call. libsodium is the copy PyNaCl
 * bundles: Python passes the address of its crypto_sign, so no second libsodium is linked or
 * needed at build time.
 *
 * sign_batch signs on the calling thread. sign_start signs on a new thread, pinned to a CPU
 * other than the caller's (left to itself, Linux often starts it on the caller's CPU, where it
 * only runs once the caller blocks), and sign_finish waits for it. Between the two the caller
 * is free to stage and sign the rest of a batch.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIGNATURE_BYTES 64

typedef int (*crypto_sign_fn)(unsigned char *sm, unsigned long long *smlen,
                              const unsigned char *m, unsigned long long mlen,
                              const unsigned char *sk);

typedef struct sign_job {
    crypto_sign_fn sign;
    const unsigned char *secret_key;
    const unsigned char *messages;
    const size_t *offsets; /* message i is messages[offsets[i] .. offsets[i + 1]) */
    size_t count;
    unsigned char *signatures; /* count * 64 bytes */
    int status;
    pthread_t thread;
} sign_job;

static void *run_job(void *arg) {
    sign_job *job = arg;
    size_t longest = 0;
    for (size_t i = 0; i < job->count; i++) {
        size_t length = job->offsets[i + 1] - job->offsets[i];
        if (length > longest) longest = length;
    }
    unsigned char *signed_message = malloc(longest + SIGNATURE_BYTES);
    if (signed_message == NULL) {
        job->status = -2;
        return NULL;
    }
    unsigned long long signed_length;
    job->status = 0;
    for (size_t i = 0; i < job->count; i++) {
        const unsigned char *message = job->messages + job->offsets[i];
        size_t length = job->offsets[i + 1] - job->offsets[i];
        if (job->sign(signed_message, &signed_length, message, length, job->secret_key) != 0) {
            job->status = -1;
            break;
        }
        /* crypto_sign writes the signature, then the message */
        memcpy(job->signatures + SIGNATURE_BYTES * i, signed_message, SIGNATURE_BYTES);
    }
    free(signed_message);
    return NULL;
}

int sign_batch(uintptr_t crypto_sign, const unsigned char *secret_key,
               const unsigned char *messages, const size_t *offsets, size_t count,
               unsigned char *signatures) {
    sign_job job = {(crypto_sign_fn)crypto_sign, secret_key, messages, offsets, count,
                    signatures, 0};
    run_job(&job);
    return job.status;
}

/* Anywhere but here; with one allowed CPU, leave the choice to the scheduler. */
static void away_from_caller(pthread_attr_t *attributes) {
    cpu_set_t allowed;
    int here = sched_getcpu();
    if (here < 0 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    CPU_CLR(here, &allowed);
    if (CPU_COUNT(&allowed) > 0) pthread_attr_setaffinity_np(attributes, sizeof allowed, &allowed);
}

/* NULL when no thread could be started: the caller then signs with sign_batch. Every job
 * returned must be passed to sign_finish, and the buffers must live until then. */
sign_job *sign_start(uintptr_t crypto_sign, const unsigned char *secret_key,
                     const unsigned char *messages, const size_t *offsets, size_t count,
                     unsigned char *signatures) {
    sign_job *job = malloc(sizeof *job);
    if (job == NULL) return NULL;
    *job = (sign_job){(crypto_sign_fn)crypto_sign, secret_key, messages, offsets, count,
                      signatures, 0};
    pthread_attr_t attributes;
    pthread_attr_init(&attributes);
    away_from_caller(&attributes);
    int started = pthread_create(&job->thread, &attributes, run_job, job);
    pthread_attr_destroy(&attributes);
    if (started != 0) {
        free(job);
        return NULL;
    }
    return job;
}

int sign_finish(sign_job *job) {
    pthread_join(job->thread, NULL);
    int status = job->status;
    free(job);
    return status;
}
