/* Sign batches of messages with libsodium's crypto_sign, without the GIL.
 *
 * Called through cffi, which releases the GIL for each call. libsodium is the copy PyNaCl
 * bundles: Python passes the address of its crypto_sign, so no second libsodium is linked or
 * needed at build time.
 *
 * sign_batch signs a whole batch on the calling thread; verify_batch checks a batch of detached
 * signatures (each with its own public key) the same way, for the mesh's receiver.
 *
 * A shared_signer signs one batch at a time on two threads. The caller opens the batch
 * (shared_begin), adds messages one by one while it builds them (shared_add), and closes it
 * (shared_finish), signing whatever is left. A helper thread that lives as long as the signer
 * wakes at shared_begin and signs each message as soon as it is added, so signing overlaps the
 * caller's own work instead of waiting for it. The two threads claim messages from one atomic
 * counter, so neither waits for a fixed half. When the helper gets ahead of the caller it spins
 * briefly, then sleeps until the next message. It is pinned to a CPU other than the caller's
 * (again at shared_finish, should the caller have moved): left to itself, Linux often wakes it
 * on the caller's CPU, where it only runs once the caller blocks.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define SIGNATURE_BYTES 64
#define SECRET_KEY_BYTES 64

typedef int (*crypto_sign_fn)(unsigned char *sm, unsigned long long *smlen,
                              const unsigned char *m, unsigned long long mlen,
                              const unsigned char *sk);

static int sign_one(crypto_sign_fn sign, const unsigned char *secret_key,
                    const unsigned char *message, size_t length, unsigned char *scratch,
                    unsigned char *signature) {
    unsigned long long signed_length;
    if (sign(scratch, &signed_length, message, length, secret_key) != 0) return -1;
    memcpy(signature, scratch, SIGNATURE_BYTES); /* crypto_sign writes it before the message */
    return 0;
}

int sign_batch(uintptr_t crypto_sign, const unsigned char *secret_key,
               const unsigned char *messages, const size_t *offsets, size_t count,
               unsigned char *signatures) {
    size_t longest = 0;
    for (size_t i = 0; i < count; i++)
        if (offsets[i + 1] - offsets[i] > longest) longest = offsets[i + 1] - offsets[i];
    unsigned char *scratch = malloc(longest + SIGNATURE_BYTES);
    if (scratch == NULL) return -2;
    int status = 0;
    for (size_t i = 0; i < count && status == 0; i++)
        status = sign_one((crypto_sign_fn)crypto_sign, secret_key, messages + offsets[i],
                          offsets[i + 1] - offsets[i], scratch, signatures + SIGNATURE_BYTES * i);
    free(scratch);
    return status;
}

typedef int (*crypto_sign_open_fn)(unsigned char *m, unsigned long long *mlen,
                                   const unsigned char *sm, unsigned long long smlen,
                                   const unsigned char *pk);

/* ok[i] = 1 where signature i (64 bytes) of message i verifies under public key i (32 bytes).
 * crypto_sign_open (PyNaCl's libsodium exports no crypto_sign_verify_detached) takes the
 * signature and the message joined; -2 when there is no memory for that. */
int verify_batch(uintptr_t crypto_sign_open, const unsigned char *messages,
                 const size_t *offsets, const unsigned char *signatures,
                 const unsigned char *public_keys, size_t count, unsigned char *ok) {
    crypto_sign_open_fn open_signed = (crypto_sign_open_fn)crypto_sign_open;
    size_t longest = 0;
    for (size_t i = 0; i < count; i++)
        if (offsets[i + 1] - offsets[i] > longest) longest = offsets[i + 1] - offsets[i];
    unsigned char *signed_message = malloc(longest + SIGNATURE_BYTES);
    unsigned char *opened = malloc(longest + SIGNATURE_BYTES);
    if (signed_message == NULL || opened == NULL) {
        free(signed_message);
        free(opened);
        return -2;
    }
    for (size_t i = 0; i < count; i++) {
        size_t length = offsets[i + 1] - offsets[i];
        unsigned long long opened_length;
        memcpy(signed_message, signatures + SIGNATURE_BYTES * i, SIGNATURE_BYTES);
        memcpy(signed_message + SIGNATURE_BYTES, messages + offsets[i], length);
        ok[i] = open_signed(opened, &opened_length, signed_message, length + SIGNATURE_BYTES,
                            public_keys + 32 * i) == 0;
    }
    free(signed_message);
    free(opened);
    return 0;
}

enum helper_state { HELPER_PENDING, HELPER_JOINED, HELPER_SKIPPED, HELPER_DONE };

typedef struct shared_signer {
    crypto_sign_fn sign;
    unsigned char secret_key[SECRET_KEY_BYTES];
    pthread_t helper;
    int helper_started;
    int pinned_away_from; /* the caller's CPU when the helper was last pinned; -1: never */
    pthread_mutex_t lock;
    pthread_cond_t wake; /* a new batch */
    pthread_cond_t more; /* a new message, or the batch closed */
    uint64_t generation; /* one per batch; the helper sleeps until it changes */
    int stopping;

    /* the open batch: message i is slots[i * slot_bytes ..][.. lengths[i]] */
    int open;
    size_t capacity, slot_bytes;
    unsigned char *slots, *signatures, *caller_scratch, *helper_scratch;
    size_t *lengths;
    _Atomic size_t published; /* messages added */
    _Atomic size_t next;      /* the next message to claim */
    _Atomic int closed;
    _Atomic int helper_state;
    _Atomic int helper_sleeping;
    _Atomic int status;
} shared_signer;

/* The helper, ahead of the caller: spin a little (the next message is usually microseconds
 * away), then sleep until shared_add or the close wakes it. */
static void await_more(shared_signer *s) {
    for (int spins = 0; spins < 20; spins++) {
        if (atomic_load(&s->next) < atomic_load(&s->published) || atomic_load(&s->closed)) return;
        sched_yield();
    }
    pthread_mutex_lock(&s->lock);
    atomic_store(&s->helper_sleeping, 1);
    while (atomic_load(&s->next) >= atomic_load(&s->published) && !atomic_load(&s->closed))
        pthread_cond_wait(&s->more, &s->lock);
    atomic_store(&s->helper_sleeping, 0);
    pthread_mutex_unlock(&s->lock);
}

/* After publishing a message or closing: wake the helper if it sleeps. The flag and the
 * counters are sequentially consistent, so either the helper sees the new state before it
 * sleeps or this sees it sleeping. */
static void wake_helper(shared_signer *s) {
    if (!atomic_load(&s->helper_sleeping)) return;
    pthread_mutex_lock(&s->lock);
    pthread_cond_signal(&s->more);
    pthread_mutex_unlock(&s->lock);
}

/* Sign messages as they are published until the batch is closed and none is left. */
static void sign_claimed(shared_signer *s, unsigned char *scratch, int is_helper) {
    for (;;) {
        size_t n = atomic_load(&s->next);
        if (n < atomic_load(&s->published)) {
            if (!atomic_compare_exchange_weak(&s->next, &n, n + 1)) continue;
            if (sign_one(s->sign, s->secret_key, s->slots + n * s->slot_bytes, s->lengths[n],
                         scratch, s->signatures + n * SIGNATURE_BYTES) != 0)
                atomic_store(&s->status, -1);
        } else if (atomic_load(&s->closed)) {
            if (atomic_load(&s->next) >= atomic_load(&s->published)) return;
        } else if (is_helper) {
            await_more(s);
        }
    }
}

static void *helper_main(void *arg) {
    shared_signer *s = arg;
    uint64_t seen = 0;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->generation == seen && !s->stopping) pthread_cond_wait(&s->wake, &s->lock);
        if (s->stopping) break;
        seen = s->generation;
        pthread_mutex_unlock(&s->lock);
        int expected = HELPER_PENDING;
        if (atomic_compare_exchange_strong(&s->helper_state, &expected, HELPER_JOINED)) {
            sign_claimed(s, s->helper_scratch, 1);
            atomic_store(&s->helper_state, HELPER_DONE);
        }
        pthread_mutex_lock(&s->lock);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

shared_signer *shared_new(uintptr_t crypto_sign, const unsigned char *secret_key) {
    shared_signer *s = calloc(1, sizeof *s);
    if (s == NULL) return NULL;
    s->sign = (crypto_sign_fn)crypto_sign;
    memcpy(s->secret_key, secret_key, SECRET_KEY_BYTES);
    s->pinned_away_from = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    pthread_cond_init(&s->more, NULL);
    return s;
}

/* Anywhere but the caller's CPU; with one allowed CPU, leave the choice to the scheduler.
 * CPU affinity calls are Linux's (glibc, musl); elsewhere (macOS, the BSDs) the helper is left
 * where the scheduler puts it, which costs speed, never correctness. */
#ifdef __linux__
static void pin_away_from_caller(shared_signer *s) {
    int here = sched_getcpu();
    if (here < 0 || here == s->pinned_away_from) return;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
    CPU_CLR(here, &allowed);
    if (CPU_COUNT(&allowed) > 0) pthread_setaffinity_np(s->helper, sizeof allowed, &allowed);
    s->pinned_away_from = here;
}
#else
static void pin_away_from_caller(shared_signer *s) { (void)s; }
#endif

static int reserve(shared_signer *s, size_t count, size_t slot_bytes) {
    if (count <= s->capacity && slot_bytes <= s->slot_bytes) return 0;
    size_t capacity = count > s->capacity ? count : s->capacity;
    size_t slot = slot_bytes > s->slot_bytes ? slot_bytes : s->slot_bytes;
    unsigned char *slots = malloc(capacity * slot);
    unsigned char *signatures = malloc(capacity * SIGNATURE_BYTES);
    size_t *lengths = malloc(capacity * sizeof *lengths);
    unsigned char *caller_scratch = malloc(slot + SIGNATURE_BYTES);
    unsigned char *helper_scratch = malloc(slot + SIGNATURE_BYTES);
    if (!slots || !signatures || !lengths || !caller_scratch || !helper_scratch) {
        free(slots), free(signatures), free(lengths), free(caller_scratch), free(helper_scratch);
        return -2;
    }
    free(s->slots), free(s->signatures), free(s->lengths);
    free(s->caller_scratch), free(s->helper_scratch);
    s->slots = slots, s->signatures = signatures, s->lengths = lengths;
    s->caller_scratch = caller_scratch, s->helper_scratch = helper_scratch;
    s->capacity = capacity, s->slot_bytes = slot;
    return 0;
}

/* Sign what is left on this thread, then wait for the helper to leave the batch. */
static int close_batch(shared_signer *s) {
    atomic_store(&s->closed, 1);
    wake_helper(s);
    sign_claimed(s, s->caller_scratch, 0);
    int expected = HELPER_PENDING;
    if (!atomic_compare_exchange_strong(&s->helper_state, &expected, HELPER_SKIPPED) &&
        expected == HELPER_JOINED)
        while (atomic_load(&s->helper_state) != HELPER_DONE) sched_yield();
    s->open = 0;
    return atomic_load(&s->status);
}

/* Open a batch of at most `count` messages of at most `slot_bytes` each. With `helped`, the
 * helper thread signs alongside the caller (started on first use); without, the caller signs
 * everything in shared_finish. A batch still open is closed first. */
int shared_begin(shared_signer *s, size_t count, size_t slot_bytes, int helped) {
    if (s->open) close_batch(s);
    if (reserve(s, count, slot_bytes) != 0) return -2;
    atomic_store(&s->published, 0);
    atomic_store(&s->next, 0);
    atomic_store(&s->closed, 0);
    atomic_store(&s->status, 0);
    s->open = 1;
    if (helped && !s->helper_started) {
        /* the helper must not take a batch before it is set up */
        atomic_store(&s->helper_state, HELPER_SKIPPED);
        s->helper_started = pthread_create(&s->helper, NULL, helper_main, s) == 0;
    }
    if (!helped || !s->helper_started) {
        atomic_store(&s->helper_state, HELPER_SKIPPED);
        return 0;
    }
    pin_away_from_caller(s);
    atomic_store(&s->helper_state, HELPER_PENDING);
    pthread_mutex_lock(&s->lock);
    s->generation++;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

/* Add the next message; -1 if the batch is not open, full, or the message too long. */
int shared_add(shared_signer *s, const unsigned char *message, size_t length) {
    size_t n = atomic_load(&s->published);
    if (!s->open || n >= s->capacity || length > s->slot_bytes) return -1;
    memcpy(s->slots + n * s->slot_bytes, message, length);
    s->lengths[n] = length;
    atomic_store(&s->published, n + 1); /* sequentially consistent: the slot is visible first */
    wake_helper(s);
    return 0;
}

/* Close the batch: the number of signatures copied to `signatures`, or a negative status. */
long shared_finish(shared_signer *s, unsigned char *signatures) {
    if (!s->open) return -1;
    /* the batch may have been opened on another thread (or CPU) than the one finishing it */
    if (s->helper_started) pin_away_from_caller(s);
    int status = close_batch(s);
    if (status != 0) return status;
    size_t count = atomic_load(&s->published);
    memcpy(signatures, s->signatures, count * SIGNATURE_BYTES);
    return (long)count;
}

void shared_free(shared_signer *s) {
    if (s->open) close_batch(s);
    if (s->helper_started) {
        pthread_mutex_lock(&s->lock);
        s->stopping = 1;
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->helper, NULL);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->wake);
    pthread_cond_destroy(&s->more);
    free(s->slots), free(s->signatures), free(s->lengths);
    free(s->caller_scratch), free(s->helper_scratch);
    explicit_bzero(s->secret_key, SECRET_KEY_BYTES);
    free(s);
}
