/* Torch operators as cpu_op ranges, through torch's own ITT hooks.
 *
 * torch.autograd.profiler.emit_itt makes every RecordFunction (each aten op, autograd node,
 * Inductor's triton_ launch ranges) call __itt_string_handle_create(name) and
 * __itt_task_begin / __itt_task_end of Intel's ITT API. libtorch carries ITT's static part,
 * which loads a collector library named by INTEL_LIBITTNOTIFY64 and calls its __itt_api_init
 * with the static part's descriptor (__itt_global) so the collector fills the function pointers.
 * cprof's extension is that collector: the four functions below push and pop ranges on the
 * calling thread's operator stack (events.c), in C, with the GIL released. No torch headers and
 * no C++: only ITT's stable C ABI (the descriptor's head and the api list, version 3).
 *
 * Condition: the variable must be set before libtorch is loaded, because torch creates its ITT
 * domain at load time and ITT gives it no domain when no collector is named then (cprof sets
 * the variable at its import when torch is not imported yet; cprof/_ops.py).
 * Threads: begin/end run on any thread (torch's callers hold no GIL); the name cache is
 * thread-local, the handle table takes a mutex on a miss only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cprof.h"

/* ---- ITT's ABI (ittnotify.h / ittnotify_config.h, version 3; layouts fixed since 2010) ---- */
typedef struct itt_domain {
    volatile int flags;          /* ITT's macros call nothing for a domain with flags 0 */
    const char *nameA;
    void *nameW;
    int extra1;
    void *extra2;
    struct itt_domain *next;
} itt_domain;

typedef struct itt_string_handle {
    const char *strA;
    void *strW;
    int extra1;
    void *extra2;
    struct itt_string_handle *next;
} itt_string_handle;

typedef struct itt_id {
    unsigned long long d1, d2, d3;
} itt_id;

typedef struct itt_api_info {
    const char *name;
    void **func_ptr;
    void *init_func;
    void *null_func;
    int group;
} itt_api_info;

typedef struct itt_global {
    unsigned char magic[8];
    unsigned long version_major, version_minor, version_build;
    volatile long api_initialized, mutex_initialized, atomic_counter;
    pthread_mutex_t mutex;
    void *lib;
    void *error_handler;
    const char **dll_path_ptr;
    itt_api_info *api_list_ptr;
    struct itt_global *next;
    void *thread_list;
    itt_domain *domain_list;
    itt_string_handle *string_list;
    int state;                   /* __itt_collection_state */
} itt_global;

static const unsigned char ITT_MAGIC[8] = {0xED, 0xAB, 0xAB, 0xEC, 0x0D, 0xEE, 0xDA, 0x30};
enum { ITT_COLLECTOR_ABSENT = 2, ITT_GROUP_ALL = -1 };
static const char TORCH_DOMAIN[] = "PyTorch";

/* A name handle: ITT's struct first (torch passes it back to task_begin), then our name id.
 * extra2 points at handle_tag: handles made by ITT's static part before it attached us (its
 * 40-byte struct, no name id) reach task_begin too, and are told apart by it. */
static const char handle_tag = 0;
typedef struct op_handle {
    itt_string_handle h;
    uint32_t name_id;
} op_handle;

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static op_handle **handles;      /* by name id; entries never move or die */
static uint32_t handles_cap;
static _Atomic(itt_global *) attached; /* the torch descriptor we filled, or NULL */
static _Atomic uint64_t n_names;

#define CACHE_SLOTS 256u
typedef struct cache_slot {
    const char *key;             /* the caller's pointer: aten op names are static strings */
    op_handle *h;
} cache_slot;
static _Thread_local cache_slot name_cache[CACHE_SLOTS];

/* ---- the collector's functions (called by torch, any thread, no GIL) ---- */

static itt_domain *itt_domain_create(const char *name) {
    itt_domain *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->nameA = strdup(name ? name : "");
    /* only torch's domain records; another library sharing this collector stays silent */
    d->flags = name && strcmp(name, TORCH_DOMAIN) == 0;
    return d; /* never freed: ITT domains live for the process */
}

static CPROF_NOINLINE op_handle *handle_slow(const char *name) {
    uint32_t id;
    if (cprof_names_intern(name, strlen(name), &id) != CPROF_OK) return NULL;
    op_handle *h = NULL;
    pthread_mutex_lock(&handles_lock);
    if (id >= handles_cap) {
        uint32_t ncap = handles_cap ? handles_cap : 1024;
        while (ncap <= id) ncap *= 2;
        op_handle **nh = realloc(handles, ncap * sizeof *nh);
        if (!nh) goto out;
        memset(nh + handles_cap, 0, (ncap - handles_cap) * sizeof *nh);
        handles = nh;
        handles_cap = ncap;
    }
    h = handles[id];
    if (!h && (h = calloc(1, sizeof *h))) {
        size_t len;
        const char *s = cprof_names_get(id, &len);
        char *copy = malloc(len + 1);
        if (!copy) {
            free(h);
            h = NULL;
            goto out;
        }
        memcpy(copy, s, len);
        copy[len] = 0;
        h->h.strA = copy;
        h->h.extra2 = (void *)&handle_tag;
        h->name_id = id;
        handles[id] = h;
        atomic_fetch_add_explicit(&n_names, 1, memory_order_relaxed);
    }
out:
    pthread_mutex_unlock(&handles_lock);
    return h;
}

static itt_string_handle *itt_string_handle_create(const char *name) {
    if (!name) return NULL;
    uintptr_t p = (uintptr_t)name;
    cache_slot *c = &name_cache[((p >> 3) ^ (p >> 12)) & (CACHE_SLOTS - 1)];
    /* the pointer may be a reused buffer with other text: compare the text too */
    if (CPROF_LIKELY(c->key == name && c->h && strcmp(c->h->h.strA, name) == 0))
        return &c->h->h;
    op_handle *h = handle_slow(name);
    if (h) {
        c->key = name;
        c->h = h;
    }
    return h ? &h->h : NULL;
}

uint32_t cprof_ops_name_id(const char *name) {
    itt_string_handle *h = itt_string_handle_create(name);
    return h ? ((op_handle *)h)->name_id : CPROF_NAME_INVALID;
}

static atomic_int itt_recording; /* cprof_ops_itt_set_recording */

void cprof_ops_itt_set_recording(int on) {
    atomic_store_explicit(&itt_recording, on != 0, memory_order_relaxed);
}

static void itt_task_begin(const itt_domain *d, itt_id id, itt_id parent, itt_string_handle *name) {
    (void)d; (void)id; (void)parent;
    if (!atomic_load_explicit(&itt_recording, memory_order_relaxed)) return;
    /* a NULL handle (out of memory) still pushes, so the matching end stays balanced */
    uint32_t name_id = CPROF_NAME_INVALID;
    if (CPROF_LIKELY(name && name->extra2 == (void *)&handle_tag)) {
        name_id = ((op_handle *)name)->name_id;
    } else if (name && name->strA) { /* made by ITT's static part before we were attached */
        op_handle *h = handle_slow(name->strA);
        if (h) name_id = h->name_id;
    }
    cprof_events_push_op(name_id);
}

static void itt_task_end(const itt_domain *d) {
    (void)d;
    if (!atomic_load_explicit(&itt_recording, memory_order_relaxed)) return;
    cprof_events_pop_op();
}

/* Called by ITT's static part (under its mutex) when it loads this library as its collector. */
CPROF_EXPORT void __itt_api_init(itt_global *g, int init_groups) {
    (void)init_groups;
    if (!g || memcmp(g->magic, ITT_MAGIC, sizeof ITT_MAGIC) != 0 || g->version_major != 3) return;
    int torch = 0;
    for (itt_domain *d = g->domain_list; d; d = d->next) {
        if (d->nameA && strcmp(d->nameA, TORCH_DOMAIN) == 0) torch = 1;
        else d->flags = 0;
    }
    for (itt_api_info *a = g->api_list_ptr; a && a->name; a++) {
        void *f = a->null_func;
        if (!strcmp(a->name, "__itt_domain_create")) f = (void *)itt_domain_create;
        else if (!strcmp(a->name, "__itt_string_handle_create")) f = (void *)itt_string_handle_create;
        else if (!strcmp(a->name, "__itt_task_begin")) f = (void *)itt_task_begin;
        else if (!strcmp(a->name, "__itt_task_end")) f = (void *)itt_task_end;
        *a->func_ptr = f;
    }
    if (torch) atomic_store(&attached, g);
}

/* ---- late attach: torch imported before cprof ---- */

/* torch keeps its ITT domain in a file-static pointer, `static __itt_domain* _itt_domain` in
 * torch/csrc/itt_wrapper.cpp, set when libtorch loads: NULL when no collector was named then.
 * It is not exported, but libtorch's full symbol table (.symtab) names it where the build kept
 * one; its address is then the library's load base plus the symbol's value. Returns NULL when
 * the file has no such symbol (a stripped build): the caller keeps the old answer. */
static const char TORCH_DOMAIN_SYM[] = "_ZN5torch8profilerL11_itt_domainE";

typedef struct {
    const char *real;  /* realpath of the library */
    uintptr_t base;
    int found;
} base_query;

static int find_base(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    base_query *q = arg;
    char real[PATH_MAX];
    if (!info->dlpi_name || !info->dlpi_name[0] || !realpath(info->dlpi_name, real)) return 0;
    if (strcmp(real, q->real) != 0) return 0;
    q->base = (uintptr_t)info->dlpi_addr;
    q->found = 1;
    return 1;
}

static itt_domain **torch_domain_slot(const char *torch_lib) {
    const char *forced = getenv("CPROF_OPS_LATE"); /* =0: never (tests the stripped-build path) */
    if (forced && !strcmp(forced, "0")) return NULL;
    char real[PATH_MAX];
    if (!realpath(torch_lib, real)) return NULL;
    base_query q = {real, 0, 0};
    dl_iterate_phdr(find_base, &q);
    if (!q.found) return NULL;
    int fd = open(real, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st;
    void *map = MAP_FAILED;
    if (fstat(fd, &st) == 0 && st.st_size > (off_t)sizeof(Elf64_Ehdr))
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return NULL;
    size_t len = (size_t)st.st_size;
    const unsigned char *b = map;
    uintptr_t value = 0;
    const Elf64_Ehdr *eh = map;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > len ||
        (size_t)eh->e_shnum * sizeof(Elf64_Shdr) > len - eh->e_shoff)
        goto done;
    const Elf64_Shdr *sh = (const Elf64_Shdr *)(b + eh->e_shoff);
    for (size_t i = 0; i < eh->e_shnum && !value; i++) {
        if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
        const Elf64_Shdr *strs = &sh[sh[i].sh_link];
        if (sh[i].sh_offset > len || sh[i].sh_size > len - sh[i].sh_offset ||
            strs->sh_offset > len || strs->sh_size > len - strs->sh_offset)
            continue;
        const Elf64_Sym *sym = (const Elf64_Sym *)(b + sh[i].sh_offset);
        size_t n = sh[i].sh_size / sizeof *sym;
        const char *names = (const char *)(b + strs->sh_offset);
        for (size_t k = 0; k < n; k++) {
            if (sym[k].st_name >= strs->sh_size || ELF64_ST_TYPE(sym[k].st_info) != STT_OBJECT ||
                sym[k].st_size != sizeof(void *) || sym[k].st_shndx == SHN_UNDEF)
                continue;
            const char *nm = names + sym[k].st_name;
            if (strnlen(nm, strs->sh_size - sym[k].st_name) == sizeof TORCH_DOMAIN_SYM - 1 &&
                memcmp(nm, TORCH_DOMAIN_SYM, sizeof TORCH_DOMAIN_SYM - 1) == 0) {
                value = (uintptr_t)sym[k].st_value;
                break;
            }
        }
    }
done:
    munmap(map, len);
    return value ? (itt_domain **)(q.base + value) : NULL;
}

/* torch was loaded with no collector named: ITT marked the collector absent and torch's domain
 * pointer is NULL. Load this library as the collector now and hand torch the domain it would
 * have had. Only where ITT is untouched otherwise (no collector, no thread seen). */
static int late_attach(itt_global *g, int (*init)(const char *, int), const char *torch_lib,
                       const char *self_path) {
    itt_domain **slot = torch_domain_slot(torch_lib);
    if (!slot || *slot != NULL || g->lib || g->api_initialized) return 0;
    long saved_state = g->state;
    g->state = 0; /* __itt_collection_uninitialized: let init load the collector */
    init(self_path, ITT_GROUP_ALL);
    if (!g->api_initialized || !g->lib) {
        g->state = (int)saved_state;
        return 0;
    }
    /* __itt_api_init saw no torch domain (there was none): the pointers are ours all the same */
    for (itt_api_info *a = g->api_list_ptr; a && a->name; a++)
        if (!strcmp(a->name, "__itt_task_begin") && *a->func_ptr != (void *)itt_task_begin)
            return 0;
    itt_domain *d = itt_domain_create(TORCH_DOMAIN);
    if (!d) return 0;
    __atomic_store_n(slot, d, __ATOMIC_RELEASE);
    atomic_store(&attached, g);
    return 1;
}

/* ---- control (binding) ---- */

int cprof_ops_itt_attach(const char *torch_lib, const char *self_path, const char **why) {
    if (!torch_lib || !self_path || !why) return CPROF_E_ARG;
    void *lib = dlopen(torch_lib, RTLD_LAZY | RTLD_NOLOAD);
    if (!lib) {
        *why = "libtorch_cpu is not loaded in this process";
        return CPROF_E_UNAVAILABLE;
    }
    itt_global *g = dlsym(lib, "__itt__ittapi_global");
    int (*init)(const char *, int) = (int (*)(const char *, int))dlsym(lib, "__itt_init_ittlib");
    dlclose(lib); /* NOLOAD took a reference; torch keeps its own */
    if (!g || !init) {
        *why = "this torch build has no ITT (built without USE_ITT)";
        return CPROF_E_UNAVAILABLE;
    }
    if (memcmp(g->magic, ITT_MAGIC, sizeof ITT_MAGIC) != 0 || g->version_major != 3) {
        *why = "torch's ITT descriptor has an unknown layout";
        return CPROF_E_UNAVAILABLE;
    }
    if (atomic_load(&attached) == g) return CPROF_OK;
    if (g->api_initialized) {
        *why = g->lib ? "another ITT collector (VTune?) is attached to torch"
                      : "torch's ITT was initialised without a collector";
        return CPROF_E_UNAVAILABLE;
    }
    if (g->state == ITT_COLLECTOR_ABSENT || !g->domain_list) {
        if (late_attach(g, init, torch_lib, self_path)) return CPROF_OK;
        *why = "torch was imported before cprof, so torch's ITT domain does not exist (and this "
               "torch build's symbol table does not name it): import cprof first (or run under "
               "`cprof run`)";
        return CPROF_E_UNAVAILABLE;
    }
    init(self_path, ITT_GROUP_ALL); /* loads self_path (this library) and calls __itt_api_init */
    if (atomic_load(&attached) != g) {
        *why = "torch's ITT did not load cprof as its collector";
        return CPROF_E_UNAVAILABLE;
    }
    return CPROF_OK;
}

int cprof_ops_itt_attached(void) { return atomic_load(&attached) != NULL; }

uint64_t cprof_ops_itt_names(void) { return atomic_load_explicit(&n_names, memory_order_relaxed); }
