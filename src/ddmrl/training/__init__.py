"""Training loops: masked-diffusion pre-training / SFT, and the online GRPO loop."""
