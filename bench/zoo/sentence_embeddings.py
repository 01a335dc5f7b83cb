"""Sentence Transformers' quickstart (encode sentences, compare them), on a small BERT built from a config and saved
locally with its own word-piece vocabulary (no hub here)."""
import os
import tempfile

from sentence_transformers import SentenceTransformer, models
from transformers import BertConfig, BertModel, BertTokenizerFast

folder = tempfile.mkdtemp()
words = [f"w{i}" for i in range(2000)]
with open(os.path.join(folder, "vocab.txt"), "w", encoding="utf-8") as handle:
    handle.write("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]))
BertTokenizerFast(vocab_file=os.path.join(folder, "vocab.txt")).save_pretrained(folder)
BertModel(BertConfig(vocab_size=2005, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                     intermediate_size=1024)).save_pretrained(folder)
transformer = models.Transformer(folder, max_seq_length=128)
model = SentenceTransformer(modules=[transformer, models.Pooling(transformer.get_word_embedding_dimension())],
                            device="cpu")
sentences = [" ".join(words[(7 * i + j) % 2000] for j in range(8 + i % 24)) for i in range(4096)]
embeddings = model.encode(sentences, batch_size=32)
similarities = model.similarity(embeddings[:64], embeddings[64:128])
