"""safetensors_io.py: the safetensors writer tests/safetensors.sh's NumPy parts share (the format:
an 8-byte little-endian header length, the JSON header, then the tensors' bytes)."""
import json, struct

def write(path, tensors):
    """tensors: name -> float array, written as F32 in this order."""
    header, blobs, at = {}, [], 0
    for k, a in tensors.items():
        b = a.astype("<f4").tobytes()
        header[k] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [at, at + len(b)]}
        blobs.append(b)
        at += len(b)
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
