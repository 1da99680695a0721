"""The vision-language image case: one prompt with an image made from a seed, in the three forms a check needs.

- `messages`: what speculators' client sends to Chat Completions (`ClientItem.messages`), the image as a PNG
  data URL, so the server needs no local-media path;
- `input_ids`: what the Hugging Face processor of the tiny model renders through the same chat template, the
  image placeholder expanded to the image's tokens: what the client checks vLLM's `prompt_token_ids` against;
- `model_inputs`: the processor's tensors (`pixel_values`, `image_grid_thw`), for the transformers reference.

The image, the words and the chat template are fixtures/tiny_vlm.json's `image_prompt`. Runs in a cell venv
(transformers, PIL and numpy are vLLM's own requirements).
"""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass
from typing import Any

from compat.fixtures.data import load

IMAGE_PROMPT: dict[str, Any] = load("tiny_vlm")["image_prompt"]
CHAT_TEMPLATE: str = IMAGE_PROMPT["chat_template"]


@dataclass
class ImagePrompt:
    messages: list[dict[str, Any]]
    input_ids: list[int]
    model_inputs: dict[str, Any]


def image():
    """The seeded RGB image (PIL)."""
    import numpy as np
    from PIL import Image

    height, width = IMAGE_PROMPT["size"]
    pixels = np.random.RandomState(IMAGE_PROMPT["seed"]).randint(0, 256, (height, width, 3), dtype=np.uint8)
    return Image.fromarray(pixels, mode="RGB")


def data_url(picture) -> str:
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def conversation(image_part: dict[str, Any]) -> list[dict[str, Any]]:
    """The user turn (the image, then the words) closed by the assistant's reply."""
    return [{"role": "user", "content": [image_part, {"type": "text", "text": IMAGE_PROMPT["text"]}]},
            {"role": "assistant", "content": IMAGE_PROMPT["reply"]}]


def build(model_dir: str) -> ImagePrompt:
    from transformers import AutoProcessor

    picture = image()
    processor = AutoProcessor.from_pretrained(model_dir)
    text = processor.apply_chat_template(conversation({"type": "image"}), chat_template=CHAT_TEMPLATE,
                                         tokenize=False, add_generation_prompt=False)
    encoded = processor(text=[text], images=[picture], return_tensors="pt")
    model_inputs = {k: v for k, v in encoded.items() if k not in ("input_ids", "attention_mask")}
    return ImagePrompt(messages=conversation({"type": "image_url", "image_url": {"url": data_url(picture)}}),
                       input_ids=encoded["input_ids"][0].tolist(), model_inputs=model_inputs)
