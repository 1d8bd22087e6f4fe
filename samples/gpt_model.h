// The decoder-only transformer of samples/train_gpt.cc and bench/gpt.cc, from nn layers (README
// "The GPT sample"): token and learned position embeddings, pre-LayerNorm blocks of causal
// multi-head attention and a GELU MLP (4x wide), dropout after the embeddings and on each
// residual branch, a final LayerNorm and an untied output head without bias. Parameter names
// follow the module tree: wte.weight, wpe.weight, blocks.0.ln1.weight,
// blocks.0.attn.in_proj_weight,
// ..., ln_f.weight, head.weight.
#pragma once
#include <metajit/metajit.h>

#include <cstdint>
#include <memory>

namespace gpt {

using namespace metajit;

struct GPTConfig {
  int64_t layers = 4, d_model = 128, heads = 4, context = 64;
  double dropout = 0.1;
};

// One pre-LayerNorm block: x + attn(ln1(x)), then + mlp(ln2(x)), dropout on each branch.
class Block : public nn::Module {
 public:
  Block(int64_t d, int64_t heads, double p)
      : ln1_(register_module("ln1", std::make_shared<nn::LayerNorm>(d))),
        attn_(register_module("attn", std::make_shared<nn::MultiheadAttention>(d, heads))),
        ln2_(register_module("ln2", std::make_shared<nn::LayerNorm>(d))),
        fc_(register_module("fc", std::make_shared<nn::Linear>(d, 4 * d))),
        proj_(register_module("proj", std::make_shared<nn::Linear>(4 * d, d))),
        drop_(register_module("drop", std::make_shared<nn::Dropout>(p))) {}

  Var operator()(const Var& x) const {
    const Var h = (*ln1_)(x);
    const Var a = x + (*drop_)((*attn_)(h, h, h, /*causal=*/true));
    return a + (*drop_)((*proj_)(gelu((*fc_)((*ln2_)(a)))));
  }

 private:
  std::shared_ptr<nn::LayerNorm> ln1_;
  std::shared_ptr<nn::MultiheadAttention> attn_;
  std::shared_ptr<nn::LayerNorm> ln2_;
  std::shared_ptr<nn::Linear> fc_, proj_;
  std::shared_ptr<nn::Dropout> drop_;
};

class GPT : public nn::Module {
 public:
  GPT(int64_t vocab, const GPTConfig& o)
      : wte_(register_module("wte", std::make_shared<nn::Embedding>(vocab, o.d_model))),
        wpe_(register_module("wpe", std::make_shared<nn::Embedding>(o.context, o.d_model))),
        drop_(register_module("drop", std::make_shared<nn::Dropout>(o.dropout))),
        blocks_(register_module("blocks", std::make_shared<nn::Sequential>())),
        ln_f_(register_module("ln_f", std::make_shared<nn::LayerNorm>(o.d_model))),
        head_(register_module("head", std::make_shared<nn::Linear>(o.d_model, vocab, false))) {
    for (int64_t l = 0; l < o.layers; ++l)
      blocks_->push_back(std::make_shared<Block>(o.d_model, o.heads, o.dropout));
  }

  // ids [B, T] (Int32, T <= context) -> logits [B, T, vocab].
  Var operator()(const Var& ids) const {
    const int64_t t = ids.shape()[1];
    const Var pos = (*wpe_)(arange(t));  // [T, d], broadcast over the batch
    const Var x = (*drop_)((*wte_)(ids) + pos);
    return (*head_)((*ln_f_)((*blocks_)(x)));
  }

 private:
  std::shared_ptr<nn::Embedding> wte_, wpe_;
  std::shared_ptr<nn::Dropout> drop_;
  std::shared_ptr<nn::Sequential> blocks_;
  std::shared_ptr<nn::LayerNorm> ln_f_;
  std::shared_ptr<nn::Linear> head_;
};

// Mean cross-entropy of logits [B, T, V] against the next characters y [B, T].
inline Var lm_loss(const Var& logits, const Var& y) {
  const int64_t bt = y.shape()[0] * y.shape()[1];
  return cross_entropy(reshape(logits, {bt, logits.shape()[2]}), reshape(y, {bt}));
}

}  // namespace gpt
