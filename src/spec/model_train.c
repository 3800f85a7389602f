/* spec/model_train.c - the model spec's 'train:' section (dtrain-model(5), TRAIN): epochs and
 * batches, the optimizer and its defaults per kind, the learning-rate schedule, frozen layers.
 * Errors go to the parse's dt_diag (model_int.h). */
#include "spec/model_spec.h"
#include "spec/model_int.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const unit_names[] = { "epochs", "steps", NULL };

#define BATCH_MAX 1048576L

static void optim_defaults(dt_train_spec *t, dt_opt_kind k)
{
        memset(&t->opt, 0, sizeof t->opt);
        t->opt.kind = k;
        t->lr = k >= DT_OPT_RMSPROP ? 0.001 : 0.01;
        t->opt.momentum = (k == DT_OPT_MOMENTUM || k == DT_OPT_NESTEROV) ? 0.9f : 0.0f;
        t->opt.beta1 = 0.9f;
        t->opt.beta2 = 0.999f;
        t->opt.eps = 1e-8f;
        t->opt.alpha = 0.99f;
}

static void parse_optimizer(dt_ms_ctx *p, dt_ymap *tm)
{
        dt_train_spec *t = &p->s->train;
        optim_defaults(t, DT_OPT_SGD);
        dt_ms_describe_names(dt_opt_names, "mapping", dt_opt_names[DT_OPT_SGD]);
        yaml_node_t *v = dt_ymap_get(tm, "optimizer");
        if (!v) return;
        if (v->type == YAML_SCALAR_NODE) {
                int k = dt_ms_lookup(p, v, dt_opt_names, "optimizer");
                if (k >= 0) optim_defaults(t, (dt_opt_kind)k);
                return;
        }
        if (v->type != YAML_MAPPING_NODE) {
                dt_yerr(p->d, p->y, v, "expected an optimizer name or mapping for 'optimizer', got %s",
                        dt_ms_kind_of(v));
                p->rc = -1;
                return;
        }
        dt_ymap m;
        DT_MS_CHECK(p, dt_ymap_open(&m, p->y, v, "train.optimizer", p->d));
        int k = -1;
        dt_ms_describe_names(dt_opt_names, NULL, "(required)");
        yaml_node_t *tn = dt_ymap_get(&m, "type");
        if (!tn) dt_ms_missing(p, v, "type", "train.optimizer");
        else k = dt_ms_lookup(p, tn, dt_opt_names, "optimizer");
        optim_defaults(t, k >= 0 ? (dt_opt_kind)k : DT_OPT_SGD);
        dt_optim_hp *o = &t->opt;
        double lr, mom, damp, b1, b2, eps, alpha;
        /* optim_defaults' rules, in words */
        dt_ykey_describe(NULL, "(0.01 for sgd, momentum, nesterov; 0.001 for rmsprop, adam, adamw)");
        DT_MS_CHECK(p, dt_ymap_num_excl(&m, "lr", &lr, t->lr, 0.0, 10.0, DT_YEXCL_MIN, 0));
        dt_ykey_describe(NULL, "(0.9 for momentum, nesterov; 0 for rmsprop)");
        DT_MS_CHECK(p, dt_ymap_num_excl(&m, "momentum", &mom, o->momentum, 0.0, 1.0, DT_YEXCL_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_num(&m, "dampening", &damp, 0.0, 0.0, 1.0, 0));
        DT_MS_CHECK(p, dt_ymap_num_excl(&m, "beta1", &b1, 0.9, 0.0, 1.0, DT_YEXCL_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_num_excl(&m, "beta2", &b2, 0.999, 0.0, 1.0, DT_YEXCL_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_num_excl(&m, "eps", &eps, 1e-8, 0.0, 1.0, DT_YEXCL_MIN, 0));
        DT_MS_CHECK(p, dt_ymap_num(&m, "alpha", &alpha, 0.99, 0.0, 1.0, 0));
        t->lr = lr;
        o->momentum = (float)mom;
        o->dampening = (float)damp;
        o->beta1 = (float)b1;
        o->beta2 = (float)b2;
        o->eps = (float)eps;
        o->alpha = (float)alpha;
        if (k >= 0) {
                const char *on = dt_opt_names[k];
                int sgdlike = k <= DT_OPT_NESTEROV, adam = k >= DT_OPT_ADAM;
                yaml_node_t *mk = dt_ymap_key_node(&m, "momentum");
                if (k == DT_OPT_SGD && mk) {
                        /* torch.optim.SGD(momentum=0.9) is our momentum (nesterov=True: nesterov) */
                        dt_yerr(p->d, p->y, mk, "key 'momentum' does not apply to optimizer 'sgd'; for SGD with "
                                "momentum (PyTorch's SGD(momentum=%g)) write type: momentum", mom);
                        p->rc = -1;
                } else if (adam) {
                        dt_ms_not_for(p, &m, "momentum", "optimizer", on);
                }
                if (k == DT_OPT_SGD || !sgdlike) dt_ms_not_for(p, &m, "dampening", "optimizer", on);
                if (!adam) {
                        dt_ms_not_for(p, &m, "beta1", "optimizer", on);
                        dt_ms_not_for(p, &m, "beta2", "optimizer", on);
                }
                if (sgdlike) dt_ms_not_for(p, &m, "eps", "optimizer", on);
                if (k != DT_OPT_RMSPROP) dt_ms_not_for(p, &m, "alpha", "optimizer", on);
                if (k == DT_OPT_NESTEROV && damp != 0.0) {
                        /* as torch.optim.SGD: Nesterov is defined for zero dampening only */
                        dt_yerr(p->d, p->y, dt_ymap_get(&m, "dampening"),
                                "optimizer 'nesterov' needs 'dampening' 0, got %g", damp);
                        p->rc = -1;
                }
        }
        dt_ymap_close(&m);
}

static void parse_schedule(dt_ms_ctx *p, dt_ymap *tm)
{
        dt_sched_spec *sc = &p->s->train.sched;
        memset(sc, 0, sizeof *sc);
        sc->kind = DT_SCHED_CONSTANT;
        sc->step_size = 1;
        sc->step_unit_epochs = 1;
        sc->gamma = 0.1;
        dt_ms_describe_names(dt_sched_names, "mapping", dt_sched_names[DT_SCHED_CONSTANT]);
        yaml_node_t *v = dt_ymap_get(tm, "schedule");
        if (!v) return;
        if (v->type == YAML_SCALAR_NODE) {
                int k = dt_ms_lookup(p, v, dt_sched_names, "schedule");
                if (k >= 0) sc->kind = (dt_sched_kind)k;
                return;
        }
        if (v->type != YAML_MAPPING_NODE) {
                dt_yerr(p->d, p->y, v, "expected a schedule name or mapping for 'schedule', got %s",
                        dt_ms_kind_of(v));
                p->rc = -1;
                return;
        }
        dt_ymap m;
        DT_MS_CHECK(p, dt_ymap_open(&m, p->y, v, "train.schedule", p->d));
        int k = -1, unit = 0;
        dt_ms_describe_names(dt_sched_names, NULL, "(required)");
        yaml_node_t *tn = dt_ymap_get(&m, "type");
        if (!tn) dt_ms_missing(p, v, "type", "train.schedule");
        else k = dt_ms_lookup(p, tn, dt_sched_names, "schedule");
        if (k >= 0) sc->kind = (dt_sched_kind)k;
        DT_MS_CHECK(p, dt_ymap_int(&m, "warmup_steps", &sc->warmup_steps, 0, 0, LONG_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_int(&m, "step_size", &sc->step_size, 1, 1, LONG_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_enum(&m, "step_unit", unit_names, &unit, 0, 0));
        sc->step_unit_epochs = unit == 0;
        DT_MS_CHECK(p, dt_ymap_num_excl(&m, "gamma", &sc->gamma, 0.1, 0.0, 1.0, DT_YEXCL_MIN, 0));
        DT_MS_CHECK(p, dt_ymap_num(&m, "min_lr", &sc->min_lr, 0.0, 0.0, HUGE_VAL, 0));
        if (k >= 0) {
                const char *sn = dt_sched_names[k];
                if (k != DT_SCHED_STEP) {
                        dt_ms_not_for(p, &m, "step_size", "schedule", sn);
                        dt_ms_not_for(p, &m, "step_unit", "schedule", sn);
                        dt_ms_not_for(p, &m, "gamma", "schedule", sn);
                }
                if (k != DT_SCHED_COSINE && k != DT_SCHED_LINEAR)
                        dt_ms_not_for(p, &m, "min_lr", "schedule", sn);
        }
        if (sc->min_lr > p->s->train.lr) {
                dt_yerr(p->d, p->y, dt_ymap_get(&m, "min_lr"), "'min_lr' (%g) is above the learning rate (%g)",
                        sc->min_lr, p->s->train.lr);
                p->rc = -1;
        }
        dt_ymap_close(&m);
}

const char *const dt_best_names[] = { "test_loss", "test_accuracy", "train_loss", "none", NULL };

/* train.freeze: a layer name pattern or a list of them (fnmatch(3): fc1, conv*, fc[12]) */
static void parse_freeze(dt_ms_ctx *p, dt_ymap *m)
{
        dt_train_spec *t = &p->s->train;
        dt_ykey_describe("pattern|list", "-");
        yaml_node_t *v = dt_ymap_get(m, "freeze");
        if (!v) return;
        t->freeze_pos = dt_ms_pos(v);
        yaml_node_item_t *a = NULL, *b = NULL, one[1];
        if (v->type == YAML_SCALAR_NODE) {
                one[0] = (yaml_node_item_t)(v - p->y->doc.nodes.start) + 1;
                a = one;
                b = one + 1;
        } else if (v->type == YAML_SEQUENCE_NODE) {
                a = v->data.sequence.items.start;
                b = v->data.sequence.items.top;
        } else {
                dt_yerr(p->d, p->y, v, "'freeze' must be a layer name pattern or a list of them, got %s", dt_ms_kind_of(v));
                p->rc = -1;
                return;
        }
        t->freeze = dt_calloc((size_t)(b - a) + 1, sizeof *t->freeze);
        for (yaml_node_item_t *it = a; it < b; it++) {
                yaml_node_t *n = yaml_document_get_node(&p->y->doc, *it);
                if (!n || n->type != YAML_SCALAR_NODE || !n->data.scalar.length) {
                        dt_yerr(p->d, p->y, n ? n : v, "'freeze' entries must be layer names or patterns (e.g. conv*), got %s",
                                n ? dt_ms_kind_of(n) : "nothing");
                        p->rc = -1;
                        continue;
                }
                t->freeze[t->nfreeze++] = dt_strdup((const char *)n->data.scalar.value);
        }
}

void dt_ms_parse_train(dt_ms_ctx *p, yaml_node_t *v)
{
        dt_train_spec *t = &p->s->train;
        dt_ymap m;
        if (dt_ymap_open(&m, p->y, v, "train", p->d) < 0) p->rc = -1;
        long epochs, batch, seed, ckpt, maxs, evb;
        double wd;
        DT_MS_CHECK(p, dt_ymap_int(&m, "epochs", &epochs, 10, 1, 100000, 0));
        DT_MS_CHECK(p, dt_ymap_int(&m, "batch", &batch, 64, 1, BATCH_MAX, 0));
        t->batch_pos = dt_ms_pos(dt_ymap_get(&m, "batch"));
        DT_MS_CHECK(p, dt_ymap_int(&m, "seed", &seed, 42, 0, LONG_MAX, 0));
        parse_optimizer(p, &m);
        DT_MS_CHECK(p, dt_ymap_num(&m, "weight_decay", &wd, 0.0, 0.0, HUGE_VAL, 0));
        parse_schedule(p, &m);
        DT_MS_CHECK(p, dt_ymap_num(&m, "clip_norm", &t->clip_norm, 0.0, 0.0, HUGE_VAL, 0));
        DT_MS_CHECK(p, dt_ymap_int(&m, "checkpoint_every", &ckpt, 0, 0, LONG_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_int(&m, "max_steps", &maxs, 0, 0, LONG_MAX, 0));
        DT_MS_CHECK(p, dt_ymap_int(&m, "eval_batch", &evb, 1000, 1, BATCH_MAX, 0));
        long keep, logev;
        DT_MS_CHECK(p, dt_ymap_int(&m, "keep_checkpoints", &keep, 1, 1, 1000000, 0));
        DT_MS_CHECK(p, dt_ymap_enum(&m, "best_metric", dt_best_names, &t->best_metric, DT_BEST_TEST_LOSS, 0));
        DT_MS_CHECK(p, dt_ymap_int(&m, "log_every", &logev, 50, 0, LONG_MAX, 0));
        t->keep_checkpoints = (int)keep;
        t->log_every = logev;
        const char *init = NULL;
        int ir = dt_ymap_str(&m, "init_from", &init, NULL, 0);
        if (ir < 0) p->rc = -1;
        if (ir == 1) {
                t->init_from_pos = dt_ms_pos(dt_ymap_get(&m, "init_from"));
                /* relative to the spec's directory, like data paths; a missing file is reported when read */
                if (init[0] == '/' || !p->s->dir[0] || !strcmp(p->s->dir, "."))
                        snprintf(t->init_from, sizeof t->init_from, "%s", init);
                else if (snprintf(t->init_from, sizeof t->init_from, "%s/%s", p->s->dir, init) >= (int)sizeof t->init_from)
                        t->init_from[0] = 0;
        }
        DT_MS_CHECK(p, dt_ymap_bool(&m, "init_strict", &t->init_strict, 1, 0));
        parse_freeze(p, &m);
        t->epochs = (int)epochs;
        t->batch = (int)batch;
        t->seed = (uint64_t)seed;
        t->opt.weight_decay = (float)wd;
        t->checkpoint_every = ckpt;
        t->max_steps = maxs;
        t->eval_batch = (int)evb;
        dt_ymap_close(&m);
}
