"""A new user's own Transformers models, written the way the README's own-model example shows:
no ``attention=True`` (they do call ``scaled_dot_product_attention``, through Transformers'
"sdpa" attention) and the step returns the model's own ``ModelOutput``, a dict. Tiny, for a CPU.
"""

import torch
from transformers import BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel

import detbench


@detbench.workload(suite="custom", items_per_step=4, loss_output=0)
def tiny_gpt2(ctx):
    config = GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=128, n_positions=64)
    model = GPT2LMHeadModel(config).to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 128, (4, 32), device=ctx.device)

    def step():
        opt.zero_grad()
        out = model(input_ids=ids, labels=ids)  # a CausalLMOutputWithCrossAttentions
        out.loss.backward()
        opt.step()
        return out  # loss first, then logits, then the KV cache

    return step


@detbench.workload(suite="custom", items_per_step=4)
def tiny_bert(ctx):
    config = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, vocab_size=128, num_labels=2)  # fmt: skip
    model = BertForSequenceClassification(config).to(ctx.device).eval()
    ids = torch.randint(0, 128, (4, 16), device=ctx.device)

    def step():
        with torch.no_grad():
            return model(input_ids=ids)  # a SequenceClassifierOutput

    return step
