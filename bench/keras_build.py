"""How long building a Keras twin takes, per preset (issue 18, item 4: a load builds the twin).

Two figures per preset: an ordinary build (``Family.build_keras``, every initial weight
drawn) and a build with every initialiser skipped (``zoo.nn.keras.skeleton``, as
``zoo.backend.load_checkpoint`` builds before it fills the variables from a file). Each is
the fastest of ``--repeats`` builds in one process after one untimed warm-up build (imports,
TensorFlow's first-op costs). Run it from a checkout to time that checkout's families::

    .venv/bin/python bench/keras_build.py [--presets gpt2,gpt2-medium,bert-base,vit-base,resnet50]
        [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import os
import time

PRESETS = "gpt2,gpt2-medium,bert-base,vit-base,resnet50"


def fastest_build(build, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        build()
        times.append(time.perf_counter() - started)
    return min(times)


def measure(name: str, repeats: int) -> dict:
    from zoo import registry
    from zoo.nn.keras import skeleton

    family, config = registry.get_family(name), registry.resolve_config(name)

    def skipped() -> None:
        with skeleton.initialisers_skipped():
            family.build_keras(config)

    skipped()  # warm-up
    return {
        "preset": name,
        "build_s": fastest_build(lambda: family.build_keras(config), repeats),
        "skipped_init_build_s": fastest_build(skipped, repeats),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--presets", default=PRESETS)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    for name in args.presets.split(","):
        print(json.dumps(measure(name, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
