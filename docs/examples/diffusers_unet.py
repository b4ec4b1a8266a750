"""A diffusion model of your own: a small diffusers UNet2DModel, one DDPM training step.

    detbench run --workload docs/examples/diffusers_unet.py --device cpu

The step predicts the noise of a seeded noisy batch and takes an AdamW step; it returns the loss
first (``loss_output=0``) and then every parameter after the update, so one differing bit
anywhere in the step shows in the fingerprint. Without diffusers the records are
``unsupported``, with the reason, rather than an error.
"""

import torch
import torch.nn.functional as F

import detbench


@detbench.workload(suite="custom", items_per_step=4, loss_output=0, attention=True)
def tiny_ddpm_unet(ctx):
    try:
        from diffusers import DDPMScheduler, UNet2DModel
    except ImportError as exc:
        raise detbench.Unsupported(f"needs diffusers: {exc}") from None
    model = UNet2DModel(
        sample_size=16,
        block_out_channels=(16, 32),
        norm_num_groups=8,
        layers_per_block=1,
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
    ).to(ctx.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    scheduler = DDPMScheduler(num_train_timesteps=1000)
    clean = torch.randn(4, 3, 16, 16, device=ctx.device)  # your images here
    noise = torch.randn_like(clean)
    t = torch.randint(0, 1000, (4,), device=ctx.device)
    noisy = scheduler.add_noise(clean, noise, t)

    def step():
        opt.zero_grad()
        loss = F.mse_loss(model(noisy, t).sample, noise)
        loss.backward()
        opt.step()
        return [loss.detach(), *(p.detach() for p in model.parameters())]

    return step
