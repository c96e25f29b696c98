// What ThreadSanitizer cannot see by itself on Linux, shown to it. For `scripts/sanitize.sh
// thread` only, which builds this with the toolchain's clang and sets LD_PRELOAD; definitions
// here come before those of the libraries the test binary loads. Two blind spots:
//
// 1. C11 threads. librdkafka creates its threads with thrd_create and locks with mtx_lock and
//    cnd_wait. glibc implements those by calling its pthread functions internally, so the
//    sanitizer, which intercepts pthread_create and pthread_mutex_lock, sees neither: a librdkafka
//    thread has no sanitizer state, and its first malloc crashes the test process (SIGSEGV in the
//    sanitizer's allocator, from rd_kafka_broker_thread_main → getaddrinfo); librdkafka's locks
//    would not count as synchronisation either. The definitions below call the pthread functions
//    the sanitizer intercepts.
//
// 2. Synchronization.Mutex. Its lock and unlock are inlined into the (instrumented) caller as one
//    atomic compare-and-exchange, but under contention they call _lockSlow/_unlockSlow in
//    libswiftSynchronization.so, which is not instrumented: it spins with its own atomics, then
//    hands the lock over in the kernel (priority-inheritance futex). The sanitizer never sees the
//    acquisition, and reports every contended critical section as a race with the previous one
//    ("Swift access race" inside `withLock`). The wrappers below call the real functions and tell
//    the sanitizer that the lock word was released or acquired (__tsan_release/__tsan_acquire:
//    the same clock the inlined atomics use). The symbols are Swift's (self in the swiftself
//    register: clang's swiftcall with swift_context); if a toolchain renames them, loading fails
//    with a message instead of reporting false races.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <threads.h>

// MARK: C11 threads on POSIX threads

static int result(int error) {
  switch (error) {
  case 0: return thrd_success;
  case ENOMEM: return thrd_nomem;
  case EBUSY: return thrd_busy;
  case ETIMEDOUT: return thrd_timedout;
  default: return thrd_error;
  }
}

struct start {
  thrd_start_t function;
  void *argument;
};

static void *run(void *pointer) {
  struct start start = *(struct start *)pointer;
  free(pointer);
  return (void *)(intptr_t)start.function(start.argument);
}

int thrd_create(thrd_t *thread, thrd_start_t function, void *argument) {
  struct start *start = malloc(sizeof *start);
  if (start == NULL) return thrd_nomem;
  start->function = function;
  start->argument = argument;
  int error = pthread_create(thread, NULL, run, start);
  if (error != 0) free(start);
  return result(error);
}

int thrd_join(thrd_t thread, int *value) {
  void *returned;
  int error = pthread_join(thread, &returned);
  if (error == 0 && value != NULL) *value = (int)(intptr_t)returned;
  return result(error);
}

int thrd_detach(thrd_t thread) { return result(pthread_detach(thread)); }

void thrd_exit(int value) { pthread_exit((void *)(intptr_t)value); }

// glibc's mtx_t, cnd_t and once_flag are pthread_mutex_t, pthread_cond_t and pthread_once_t in
// disguise (same size and alignment); glibc's own implementation casts them the same way.
int mtx_init(mtx_t *mutex, int type) {
  pthread_mutexattr_t attributes;
  pthread_mutexattr_init(&attributes);
  if (type & mtx_recursive) pthread_mutexattr_settype(&attributes, PTHREAD_MUTEX_RECURSIVE);
  int error = pthread_mutex_init((pthread_mutex_t *)mutex, &attributes);
  pthread_mutexattr_destroy(&attributes);
  return result(error);
}

int mtx_lock(mtx_t *mutex) { return result(pthread_mutex_lock((pthread_mutex_t *)mutex)); }
int mtx_trylock(mtx_t *mutex) { return result(pthread_mutex_trylock((pthread_mutex_t *)mutex)); }
int mtx_timedlock(mtx_t *restrict mutex, const struct timespec *restrict deadline) {
  return result(pthread_mutex_timedlock((pthread_mutex_t *)mutex, deadline));
}
int mtx_unlock(mtx_t *mutex) { return result(pthread_mutex_unlock((pthread_mutex_t *)mutex)); }
void mtx_destroy(mtx_t *mutex) { pthread_mutex_destroy((pthread_mutex_t *)mutex); }

int cnd_init(cnd_t *condition) { return result(pthread_cond_init((pthread_cond_t *)condition, NULL)); }
int cnd_signal(cnd_t *condition) { return result(pthread_cond_signal((pthread_cond_t *)condition)); }
int cnd_broadcast(cnd_t *condition) { return result(pthread_cond_broadcast((pthread_cond_t *)condition)); }
int cnd_wait(cnd_t *condition, mtx_t *mutex) {
  return result(pthread_cond_wait((pthread_cond_t *)condition, (pthread_mutex_t *)mutex));
}
int cnd_timedwait(cnd_t *restrict condition, mtx_t *restrict mutex, const struct timespec *restrict deadline) {
  return result(pthread_cond_timedwait((pthread_cond_t *)condition, (pthread_mutex_t *)mutex, deadline));
}
void cnd_destroy(cnd_t *condition) { pthread_cond_destroy((pthread_cond_t *)condition); }

void call_once(once_flag *flag, void (*function)(void)) { pthread_once((pthread_once_t *)flag, function); }

// MARK: Synchronization.Mutex's slow paths

// In the sanitizer runtime, which is linked into the instrumented test binary; absent from other
// processes that inherit LD_PRELOAD (swift test itself), where the wrappers only forward.
static void (*tsan_acquire)(void *address);
static void (*tsan_release)(void *address);

#define LOCK_SLOW "$s15Synchronization12_MutexHandleV9_lockSlowyys6UInt32VF"
#define TRY_LOCK_SLOW "$s15Synchronization12_MutexHandleV12_tryLockSlowSbyF"
#define UNLOCK_SLOW "$s15Synchronization12_MutexHandleV11_unlockSlowyyF"

#define SWIFT_SELF __attribute__((swift_context))
typedef void __attribute__((swiftcall)) (*lock_slow_t)(uint32_t thread, void *SWIFT_SELF lock);
typedef bool __attribute__((swiftcall)) (*try_lock_slow_t)(void *SWIFT_SELF lock);
typedef void __attribute__((swiftcall)) (*unlock_slow_t)(void *SWIFT_SELF lock);

static lock_slow_t real_lock_slow;
static try_lock_slow_t real_try_lock_slow;
static unlock_slow_t real_unlock_slow;

static void *next(const char *symbol) {
  void *address = dlsym(RTLD_NEXT, symbol);
  if (address == NULL) {
    fprintf(stderr, "tsan-preload: %s not found: this toolchain's Mutex differs; update scripts/tsan-preload.c\n", symbol);
    abort();
  }
  return address;
}

// At load time, before any thread of the test binary runs: libswiftSynchronization.so is loaded
// by then (the binary links it). In a process without it or without the sanitizer, nothing.
__attribute__((constructor)) static void resolve(void) {
  tsan_acquire = (void (*)(void *))dlsym(RTLD_DEFAULT, "__tsan_acquire");
  tsan_release = (void (*)(void *))dlsym(RTLD_DEFAULT, "__tsan_release");
  if (tsan_acquire == NULL || tsan_release == NULL || dlsym(RTLD_NEXT, LOCK_SLOW) == NULL) return;
  real_lock_slow = (lock_slow_t)next(LOCK_SLOW);
  real_try_lock_slow = (try_lock_slow_t)next(TRY_LOCK_SLOW);
  real_unlock_slow = (unlock_slow_t)next(UNLOCK_SLOW);
}

__attribute__((swiftcall)) void lock_slow(uint32_t thread, void *SWIFT_SELF lock) __asm__(LOCK_SLOW);
__attribute__((swiftcall)) void lock_slow(uint32_t thread, void *SWIFT_SELF lock) {
  if (real_lock_slow == NULL) real_lock_slow = (lock_slow_t)next(LOCK_SLOW);  // a process without the sanitizer
  real_lock_slow(thread, lock);
  if (tsan_acquire != NULL) tsan_acquire(lock);
}

__attribute__((swiftcall)) bool try_lock_slow(void *SWIFT_SELF lock) __asm__(TRY_LOCK_SLOW);
__attribute__((swiftcall)) bool try_lock_slow(void *SWIFT_SELF lock) {
  if (real_try_lock_slow == NULL) real_try_lock_slow = (try_lock_slow_t)next(TRY_LOCK_SLOW);
  bool locked = real_try_lock_slow(lock);
  if (locked && tsan_acquire != NULL) tsan_acquire(lock);
  return locked;
}

__attribute__((swiftcall)) void unlock_slow(void *SWIFT_SELF lock) __asm__(UNLOCK_SLOW);
__attribute__((swiftcall)) void unlock_slow(void *SWIFT_SELF lock) {
  if (real_unlock_slow == NULL) real_unlock_slow = (unlock_slow_t)next(UNLOCK_SLOW);
  if (tsan_release != NULL) tsan_release(lock);
  real_unlock_slow(lock);
}
