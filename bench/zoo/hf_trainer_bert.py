"""A Hugging Face Trainer fine-tune of a BERT classifier, as its sequence-classification guide runs it, on a small
BERT built from a config and a synthetic tokenised dataset (no hub here)."""
import tempfile

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokenised(torch.utils.data.Dataset):
    def __init__(self, size: int = 2048, length: int = 64):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(5, 1000, (size, length), generator=generator)
        self.labels = torch.randint(0, 2, (size,), generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return {"input_ids": self.ids[index], "attention_mask": torch.ones_like(self.ids[index]),
                "labels": self.labels[index]}


config = BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                    intermediate_size=512, num_labels=2)
model = BertForSequenceClassification(config)
arguments = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=32, max_steps=300,
                              report_to=[], use_cpu=True, logging_steps=50, save_strategy="no")
Trainer(model=model, args=arguments, train_dataset=Tokenised()).train()
