"""setuptools hooks of the kudus package (pyproject.toml holds the rest).

With KUDUS_WHEEL_LIB=/path/to/libkudus.so.0 in the environment, the build
copies that library into the package as kudus/_lib/libkudus.so.0, which
kudus loads before pkg-config's and the system's, and the wheel is tagged
for this platform (py3-none-linux_x86_64, say) instead of pure Python:

    KUDUS_WHEEL_LIB=build/libkudus.so.0 \\
        pip wheel ./python --no-deps --no-index --no-build-isolation -w dist

The copy still links to the system's libczmq, libzmq, libmsgpackc,
libopenblas and zlib (Debian: libczmq4 libzmq5 libmsgpackc2 libopenblas0
zlib1g), which a machine without the C build must have.
"""
import os
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

LIB = os.environ.get("KUDUS_WHEEL_LIB")


class BuildPy(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "kudus", "_lib")
        # A build directory reused without KUDUS_WHEEL_LIB must not keep an
        # older run's copy.
        shutil.rmtree(dest, ignore_errors=True)
        if LIB:
            if not os.path.isfile(LIB):
                raise SystemExit(f"setup.py: KUDUS_WHEEL_LIB={LIB!r} is not a file")
            os.makedirs(dest)
            # The real file under the library's SONAME, not a symlink.
            shutil.copyfile(os.path.realpath(LIB), os.path.join(dest, "libkudus.so.0"))
            os.chmod(os.path.join(dest, "libkudus.so.0"), 0o755)


class KudusDistribution(Distribution):
    """With a library to bundle the package is platform-specific (platlib)."""

    def has_ext_modules(self):
        return bool(LIB)


cmdclass = {"build_py": BuildPy}

try:
    from wheel.bdist_wheel import bdist_wheel

    class BdistWheel(bdist_wheel):
        """The bundled library is plain C: any Python 3 on this platform."""

        def get_tag(self):
            python, abi, plat = super().get_tag()
            return ("py3", "none", plat) if LIB else (python, abi, plat)

    cmdclass["bdist_wheel"] = BdistWheel
except ImportError:         # no wheel package: plain installs still work
    pass

setup(cmdclass=cmdclass, distclass=KudusDistribution)
