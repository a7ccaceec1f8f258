"""core/worker_setup.py: the broker job's workers keep pyarrow and pydantic
out, and Ray's serialization context (what pulled them in) still works."""
import subprocess
import sys

from core.worker_setup import BROKER_RUNTIME_ENV, NOT_IN_BROKER_WORKERS, keep_workers_lean


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_serialization_context_imports_them_without_the_hook():
    # The cost the hook removes exists: otherwise the test below proves nothing.
    done = _run("import sys, ray; from ray._private.serialization import SerializationContext; "
                "SerializationContext(ray._private.worker.global_worker); "
                "print(sorted(m for m in ('pyarrow', 'pydantic') if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['pyarrow', 'pydantic']"


def test_after_the_hook_they_stay_out_and_objects_still_serialize():
    done = _run("import sys, ray; from core.worker_setup import keep_workers_lean; keep_workers_lean(); "
                "from ray._private.serialization import SerializationContext; "
                "ctx = SerializationContext(ray._private.worker.global_worker); "
                "import pickle; obj = {'a': [1, 2.5, b'x' * 10], 'b': ('t', 3)}; "
                "assert ray.cloudpickle.loads(ray.cloudpickle.dumps(obj)) == obj; "
                "print(sorted(m for m in ('pyarrow', 'pydantic') if sys.modules.get(m) is not None))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_a_module_already_imported_is_left_alone():
    saved = {name: sys.modules.get(name, KeyError) for name in NOT_IN_BROKER_WORKERS}
    sentinel = object()
    try:
        sys.modules["pyarrow"] = sentinel
        sys.modules.pop("pydantic", None)
        keep_workers_lean()
        assert sys.modules["pyarrow"] is sentinel
        assert sys.modules["pydantic"] is None
    finally:
        for name, module in saved.items():
            if module is KeyError:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def test_the_runtime_env_names_the_hook_by_import_path():
    module, _, func = BROKER_RUNTIME_ENV["worker_process_setup_hook"].rpartition(".")
    assert (module, func) == ("core.worker_setup", "keep_workers_lean")
