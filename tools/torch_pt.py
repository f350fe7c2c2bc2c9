# torch_pt.py: reads a PyTorch checkpoint (torch.save's zip format: a
# state_dict of contiguous FP32, FP16 or BF16 tensors) into numpy arrays
# with the standard library's pickle, without torch, for the tools that
# compute reference outputs on machines without torch (tools/make-xlmr.py
# reads bge-m3's heads with it). Only the classes a state_dict pickles are
# resolved; anything else is refused.
import collections
import pickle
import zipfile

import numpy as np

_DTYPES = {"FloatStorage": np.float32, "HalfStorage": np.float16, "BFloat16Storage": "bf16"}


def _decode(raw, kind):
    if kind == "bf16":
        return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
    return np.frombuffer(raw, kind)


def load(path):
    """{name: numpy array} of the state_dict at path (FP16 stays FP16)."""
    with zipfile.ZipFile(path) as z:
        pkl = [n for n in z.namelist() if n.endswith("/data.pkl")]
        if len(pkl) != 1:
            raise ValueError(f"{path}: not a torch.save zip file")
        root = pkl[0][: -len("data.pkl")]

        class Unpickler(pickle.Unpickler):
            def find_class(self, module, name):
                if (module, name) == ("collections", "OrderedDict"):
                    return collections.OrderedDict
                if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                    return rebuild
                if module == "torch" and name in _DTYPES:
                    return name
                raise pickle.UnpicklingError(f"{path}: {module}.{name} is not allowed")

            def persistent_load(self, pid):
                kind, storage, key, _location, numel = pid
                if kind != "storage" or storage not in _DTYPES:
                    raise pickle.UnpicklingError(f"{path}: storage {pid!r}")
                arr = _decode(z.read(f"{root}data/{key}"), _DTYPES[storage])
                if arr.size != numel:
                    raise ValueError(f"{path}: storage {key} has {arr.size} values, not {numel}")
                return arr

        def rebuild(storage, offset, size, stride, *_):
            n = int(np.prod(size)) if size else 1
            want = tuple(int(np.prod(size[i + 1:])) for i in range(len(size)))
            if n > 1 and tuple(stride) != want:
                raise ValueError(f"{path}: a tensor is not contiguous")
            return storage[offset:offset + n].reshape(size)

        with z.open(pkl[0]) as f:
            return dict(Unpickler(f).load())
