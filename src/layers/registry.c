/* layers/registry.c - every layer kind, by YAML type name; shared parse helpers and init names. */
#include "layers/layer.h"

#include <stdio.h>

#include <string.h>

extern const dt_layer_ops dt_fc_layer, dt_act_layer, dt_dropout_layer, dt_flatten_layer, dt_conv_layer,
        dt_maxpool_layer, dt_avgpool_layer, dt_global_avgpool_layer, dt_batchnorm_layer, dt_rnn_layer,
        dt_lstm_layer, dt_gru_layer, dt_embedding_layer, dt_add_layer, dt_concat_layer,
        dt_layernorm_layer, dt_attention_layer, dt_positions_layer;

const dt_layer_ops *const dt_layer_kinds[] = {
        &dt_fc_layer, &dt_act_layer, &dt_dropout_layer, &dt_flatten_layer,
        &dt_conv_layer, &dt_maxpool_layer, &dt_avgpool_layer, &dt_global_avgpool_layer, &dt_batchnorm_layer,
        &dt_rnn_layer, &dt_lstm_layer, &dt_gru_layer, &dt_embedding_layer, &dt_add_layer, &dt_concat_layer,
        &dt_layernorm_layer, &dt_attention_layer, &dt_positions_layer,
        NULL,
};

const char *const dt_init_names[] = {
        "zeros", "ones", "const", "xavier_uniform", "xavier_normal", "he_uniform", "he_normal",
        "torch", "orthogonal", NULL,
};

const dt_layer_ops *dt_layer_find(const char *type)
{
        for (int i = 0; dt_layer_kinds[i]; i++)
                if (!strcmp(dt_layer_kinds[i]->name, type)) return dt_layer_kinds[i];
        return NULL;
}

int dt_layer_kind_count(void)
{
        int n = 0;
        while (dt_layer_kinds[n]) n++;
        return n;
}

int dt_parse_act(dt_ymap *m, const char *key, dt_act *out, float *alpha, dt_act def)
{
        int a = (int)def, rc = 0;
        double al = 0.01;
        if (dt_ymap_enum(m, key, dt_act_names, &a, (int)def, 0) < 0) rc = -1;
        if (dt_ymap_num(m, "alpha", &al, 0.01, 0.0, 1.0, 0) < 0) rc = -1;
        *out = (dt_act)a;
        *alpha = (float)al;
        return rc;
}

int dt_parse_init(dt_ymap *m, const char *key, dt_init *out, dt_init def)
{
        int v = (int)def;
        if (dt_ymap_key_hook) {
                /* `dtrain keys`: the values a layer takes, so without const */
                char list[256] = "";
                size_t k = 0;
                for (int i = 0; dt_init_names[i] && k < sizeof list; i++)
                        if (i != DT_INIT_CONST)
                                k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", k ? "|" : "", dt_init_names[i]);
                dt_ykey_describe(list, NULL);
        }
        int rc = dt_ymap_enum(m, key, dt_init_names, &v, (int)def, 0);
        if (rc > 0 && v == DT_INIT_CONST) {
                /* a constant needs a value, which no layer key carries yet */
                dt_yerr(m->d, m->y, dt_ymap_get(m, key), "init 'const' is for layers' own buffers; use zeros or ones");
                rc = -1;
        }
        *out = (dt_init)v;
        return rc < 0 ? -1 : 0;
}

uint64_t dt_hash64(uint64_t a, uint64_t b)
{
        uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
}

int dt_layer_host_or(unsigned caps, unsigned fused, const char *backend, const char *what, char *why, size_t n)
{
        if (caps & (DT_CAP_HOST_MEMORY | fused)) return 0;
        snprintf(why, n, "the %s backend has no %s op", backend, what);
        return -1;
}
