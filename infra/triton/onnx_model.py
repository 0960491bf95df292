"""Triton python-backend model that runs an ONNX graph with ONNX Runtime.

Copied into each model version of the generated repository (CPU
configuration). Triton hands ``execute`` every request of one dynamic batch;
they are concatenated and run as ONE inference, then split back, which is
what makes dynamic batching pay off.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        version_dir = os.path.join(args["model_repository"], args["model_version"])
        options = ort.SessionOptions()
        threads = int(
            config.get("parameters", {}).get("intra_op_threads", {}).get("string_value", "1")
        )
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        # ONNX Runtime's pool threads spin after each run by default. With
        # small requests that burned about 15 ms of CPU per request across
        # the stubs (measured), more than everything else together; a
        # blocking wait costs microseconds of latency instead.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        self.session = ort.InferenceSession(
            os.path.join(version_dir, "model.onnx"), options, providers=["CPUExecutionProvider"]
        )
        # The config is the model's, shared by its versions; a version's graph
        # may take fewer inputs (rankers from before the affinity feature have no "user_affinity"),
        # so each version is fed what its own graph declares.
        declared = {i.name: i.shape for i in self.session.get_inputs()}
        self.inputs = [i["name"] for i in config["input"] if i["name"] in declared]
        self.outputs = [o["name"] for o in config["output"]]
        # And a version's graph may take fewer columns of an input (rankers
        # from before the repeat source take 4 source features, not 6): each
        # is cut to the width its graph declares.
        self.widths = {
            name: shape[-1]
            for name, shape in declared.items()
            if len(shape) > 1 and isinstance(shape[-1], int)
        }

    def execute(self, requests):
        columns = {name: [] for name in self.inputs}
        for request in requests:
            for name in self.inputs:
                columns[name].append(pb_utils.get_input_tensor_by_name(request, name).as_numpy())
        sizes = [len(a) for a in columns[self.inputs[0]]]
        feed = {name: np.concatenate(parts) for name, parts in columns.items()}
        for name, width in self.widths.items():
            if name in feed and feed[name].shape[-1] > width:
                feed[name] = feed[name][..., :width]
        results = self.session.run(self.outputs, feed)
        responses = []
        offset = 0
        for size in sizes:
            tensors = [
                pb_utils.Tensor(name, result[offset : offset + size])
                for name, result in zip(self.outputs, results, strict=True)
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            offset += size
        return responses
