"""Error codes kept as plain ints outside the edge (replica processes do not
import kio) must equal Kafka's, as kio generates them from Kafka's JSON."""
from kio.schema.errors import ErrorCode

from core import error_codes
from storage import errors as storage_errors


def _int_constants(module):
    return {name: value for name, value in vars(module).items()
            if name.isupper() and isinstance(value, int)}


def test_replica_error_codes_equal_kafkas():
    codes = _int_constants(error_codes)
    assert len(codes) >= 7
    for name, value in codes.items():
        assert int(ErrorCode[name.lower()]) == value, name


def test_storage_error_codes_equal_kafkas():
    codes = _int_constants(storage_errors)
    assert len(codes) >= 9
    for name, value in codes.items():
        assert int(ErrorCode[name.lower()]) == value, name


def test_replica_modules_do_not_import_kio():
    """A replica process imports its own module and, when it looks the node's
    purgatory up (ray.get_actor loads the actor's class), the purgatory's."""
    import subprocess
    import sys
    code = ("import sys; import actors.partition_leader, actors.purgatory; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('kio', 'hypothesis', 'kazoo')); "
            "print(bad); sys.exit(1 if bad else 0)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
