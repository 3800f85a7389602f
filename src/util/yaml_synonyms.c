/* util/yaml_synonyms.c - the words other frameworks use for our keys and values (PyTorch, Lightning,
 * Keras, Caffe), for the "did you mean" of an unknown key or value: dt_suggest picks a candidate
 * the reader accepts, dt_advice a sentence where no key of that mapping is the answer. */
#include "util/yaml_util.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* word (any case) -> ours, when ours is one of the candidates; whose says where the word is from. */
static const struct { const char *word, *ours, *whose; } synonyms[] = {
        /* layer keys */
        { "out_channels", "filters", "PyTorch's out_channels" },
        { "kernel_size", "kernel", "PyTorch's kernel_size" },
        { "pad", "padding", "Caffe's pad" },
        { "out_features", "units", "PyTorch's out_features" },
        { "p", "rate", "PyTorch's Dropout(p)" },
        { "hidden_size", "hidden", "PyTorch's hidden_size" },
        { "num_layers", "layers", "PyTorch's num_layers" },
        { "num_embeddings", "vocab", "PyTorch's num_embeddings" },
        { "embedding_dim", "dim", "PyTorch's embedding_dim" },
        /* train, optimizer, schedule keys */
        { "batch_size", "batch", "PyTorch's batch_size" },
        { "max_epochs", "epochs", "Lightning's max_epochs" },
        { "gradient_clip_val", "clip_norm", "Lightning's gradient_clip_val" },
        { "max_norm", "clip_norm", "PyTorch's clip_grad_norm_(max_norm)" },
        { "learning_rate", "lr", "Keras' learning_rate" },
        { "betas", "beta1", "PyTorch's betas: give beta1 and beta2" },
        { "eta_min", "min_lr", "PyTorch's eta_min" },
        /* layer types */
        { "linear", "fc", "PyTorch's nn.Linear" },
        { "dense", "fc", "Keras' Dense" },
        { "conv2d", "conv", "PyTorch's nn.Conv2d" },
        { "convolution", "conv", "Caffe's Convolution" },
        { "pool", "maxpool", "or avgpool, for average pooling" },
        { "pooling", "maxpool", "or avgpool, for average pooling" },
        { "maxpool2d", "maxpool", "PyTorch's nn.MaxPool2d" },
        { "avgpool2d", "avgpool", "PyTorch's nn.AvgPool2d" },
        { "adaptiveavgpool2d", "global_avgpool", "PyTorch's nn.AdaptiveAvgPool2d(1)" },
        { "batchnorm1d", "batchnorm", "PyTorch's nn.BatchNorm1d" },
        { "batchnorm2d", "batchnorm", "PyTorch's nn.BatchNorm2d" },
        { "relu", "activation", "with function: relu" },
        { "leaky_relu", "activation", "with function: leaky_relu" },
        { "leakyrelu", "activation", "with function: leaky_relu" },
        { "tanh", "activation", "with function: tanh" },
        { "sigmoid", "activation", "with function: sigmoid" },
        { "gelu", "activation", "with function: gelu" },
        { "cat", "concat", "PyTorch's torch.cat" },
        { "multiheadattention", "attention", "PyTorch's nn.MultiheadAttention" },
        { "self_attention", "attention", "with causal: true for a decoder's" },
        /* losses */
        { "cross_entropy", "softmax_cross_entropy", "PyTorch's cross_entropy" },
        { "crossentropy", "softmax_cross_entropy", "PyTorch's CrossEntropyLoss" },
        { "crossentropyloss", "softmax_cross_entropy", "PyTorch's CrossEntropyLoss" },
        { "categorical_crossentropy", "softmax_cross_entropy", "Keras' categorical_crossentropy" },
        { "sparse_categorical_crossentropy", "softmax_cross_entropy", "Keras' sparse_categorical_crossentropy" },
        { "softmaxwithloss", "softmax_cross_entropy", "Caffe's SoftmaxWithLoss" },
        { "mse_loss", "mse", "PyTorch's mse_loss" },
        { "mseloss", "mse", "PyTorch's MSELoss" },
        { "mean_squared_error", "mse", "Keras' mean_squared_error" },
        /* schedules */
        { "cosineannealinglr", "cosine", "PyTorch's CosineAnnealingLR" },
        { "cosine_annealing", "cosine", "PyTorch's CosineAnnealingLR" },
        { "steplr", "step", "PyTorch's StepLR" },
        { "linearlr", "linear", "PyTorch's LinearLR" },
};

/* ctx (a mapping, as dt_ymap's) and word (any case) -> what to write instead, where no key of the
 * mapping is the answer */
static const struct { const char *ctx, *word, *advice; } advice[] = {
        { "train.optimizer", "nesterov", "write type: nesterov instead (PyTorch's SGD(nesterov=True))" },
        { "train", "lr", "the learning rate goes in the optimizer: optimizer: {type: sgd, lr: 0.01}" },
        { "train", "learning_rate", "the learning rate goes in the optimizer: optimizer: {type: sgd, lr: 0.01}" },
        { "train", "momentum", "momentum goes in the optimizer: optimizer: {type: momentum, momentum: 0.9}" },
        { "train.optimizer", "weight_decay", "weight_decay is a key of 'train', next to 'optimizer'" },
        { "data", "batch_size", "the batch size is train.batch" },
        { "data", "batch", "the batch size is train.batch" },
        { "layers.", "in_channels", "dtrain infers it from the layer's input (PyTorch's in_channels)" },
        { "layers.", "in_features", "dtrain infers it from the layer's input (PyTorch's in_features)" },
        { "layers.", "num_features", "dtrain infers it from the layer's input (PyTorch's num_features)" },
        { "layers.", "input_size", "dtrain infers it from the layer's input (PyTorch's input_size)" },
        { "layers.", "batch_first", "sequences are always (steps, features) per sample, as batch_first=True" },
};

const char *dt_suggest(const char *word, const char *const *cands, int n, char *note, size_t len)
{
        if (note && len) note[0] = 0;
        if (!word) return NULL;
        for (size_t i = 0; i < sizeof synonyms / sizeof *synonyms; i++) {
                if (strcasecmp(word, synonyms[i].word)) continue;
                for (int k = 0; k < n; k++)
                        if (cands[k] && !strcmp(cands[k], synonyms[i].ours)) {
                                if (note && len) snprintf(note, len, " (%s)", synonyms[i].whose);
                                return cands[k];
                        }
        }
        /* SGD, ReLU, Adam: the same name in another case */
        for (int k = 0; k < n; k++)
                if (cands[k] && !strcasecmp(word, cands[k])) return cands[k];
        return dt_did_you_mean(word, cands, n);
}

int dt_is_synonym(const char *word, const char *ours)
{
        for (size_t i = 0; word && i < sizeof synonyms / sizeof *synonyms; i++)
                if (!strcasecmp(word, synonyms[i].word) && !strcmp(ours, synonyms[i].ours)) return 1;
        return 0;
}

const char *dt_advice(const char *ctx, const char *word)
{
        if (!ctx || !word) return NULL;
        for (size_t i = 0; i < sizeof advice / sizeof *advice; i++) {
                size_t cl = strlen(advice[i].ctx);
                int match = advice[i].ctx[cl - 1] == '.' ? !strncmp(ctx, advice[i].ctx, cl) : !strcmp(ctx, advice[i].ctx);
                if (match && !strcasecmp(word, advice[i].word)) return advice[i].advice;
        }
        return NULL;
}
