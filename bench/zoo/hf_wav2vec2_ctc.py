"""Transformers' speech recognition fine-tuning (run_speech_recognition_ctc), reduced: Wav2Vec2ForCTC from a small
config (its convolutional front end over raw 16 kHz audio), CTC on random one-second clips and labels."""
import torch
from transformers import Wav2Vec2Config, Wav2Vec2ForCTC

config = Wav2Vec2Config(vocab_size=32, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=256, conv_dim=(64, 64, 64, 64, 64, 64, 64))
model = Wav2Vec2ForCTC(config)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
generator = torch.Generator().manual_seed(0)
audio, labels = torch.randn(32, 16000, generator=generator), torch.randint(1, 32, (32, 20), generator=generator)
model.train()
for step in range(200):
    index = torch.arange(4) + (step * 4) % 32
    loss = model(input_values=audio[index], labels=labels[index]).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
