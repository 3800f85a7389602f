/* train/device.h - the trainer's side of devices: picking the backend from --device / the specs
 * (cpu, cuda, auto), and a host mirror of a device backend's flat buffers for the code that reads
 * host memory (checkpoints, safetensors). On the cpu backend the mirror is inactive and costs
 * nothing: the graph's buffers are host memory already. */
#ifndef DT_DEVICE_H
#define DT_DEVICE_H

#include "graph/graph.h"
#include "train/ckpt.h"
#include "spec/cluster_spec.h"
#include "parallel/comm.h"

/* Opens the device backend for 'device' ("cpu", "cuda", "auto"; 'from' names where it came from,
 * for messages) on GPU (comm's local rank) % count. All ranks agree: when one rank cannot open CUDA, every
 * rank returns DT_EXIT_RUNTIME and the failing rank(s) print one line saying why. 'auto' falls
 * back to the cpu with a one-line note (rank 0, unless quiet). Returns 0 with *out set, or NULL
 * when the cpu backend is to be used (the caller makes it, with its thread count). */
int dt_device_open(const char *device, const char *from, dt_comm *comm, int deterministic, int quiet,
                   dt_backend **out);
/* Cluster settings a device backend cannot honour yet; 0 or DT_EXIT_USAGE after a message. */
int dt_device_check_cluster(const dt_backend *be, const dt_cluster_spec *cs, int nranks);
/* 1 when be's pointers are not host memory. */
int dt_device_is_remote(const dt_backend *be);

typedef struct dt_host_mirror {
        int active;
        dt_backend *be;
        dt_graph hg;            /* the graph with params/buffers pointing at host copies */
        dt_moments hmo;         /* host copies of the moments */
} dt_host_mirror;

void dt_mirror_init(dt_host_mirror *m, dt_backend *be, const dt_graph *g, const dt_moments *mo);
/* Device -> host; returns the graph and moments to hand to dt_ckpt_save / dt_model_save. */
void dt_mirror_pull(dt_host_mirror *m, const dt_graph *g, const dt_moments *mo, const dt_graph **hg,
                    dt_moments **hmo);
/* The graph and moments for dt_ckpt_load to fill (host), then dt_mirror_push uploads them. */
void dt_mirror_target(dt_host_mirror *m, dt_graph *g, dt_moments *mo, dt_graph **hg, dt_moments **hmo);
void dt_mirror_push(dt_host_mirror *m, dt_graph *g, dt_moments *mo);
void dt_mirror_free(dt_host_mirror *m);

#endif
