import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments

from advisor.integrations.transformers import AdvisorCallback

OUT = sys.argv[1]


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 1024

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 100, (32,), generator=g), "labels": torch.tensor(i % 2)}


config = BertConfig(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
model = BertForSequenceClassification(config)
args = TrainingArguments(output_dir=f"{OUT}/hf", max_steps=40, per_device_train_batch_size=8, report_to=[],
                         use_cpu=True, logging_steps=1000, save_strategy="no")
trainer = Trainer(model=model, args=args, train_dataset=Data(),
                  callbacks=[AdvisorCallback(out=f"{OUT}/reports", steps=10)])
trainer.train()
print("TRAINED", trainer.state.global_step)
