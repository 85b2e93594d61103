"""ExecuTorch's runtime error codes, named and explained for someone running a
program: what each one most likely means on load or execute, and what to do.
Torch-free; etdeploy.runner uses it to translate a runner's failure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EtErrorInfo:
    """What an ExecuTorch error code means for someone running a program."""

    name: str
    cause: str
    hint: str


# executorch::runtime::Error: the names and codes are runtime/core/error.h in the
# executorch 1.5.1 wheel's include/ (read 2026-12-03); the causes are where the
# runtime raises each one on load or execute (runtime/executor/method.cpp,
# program.cpp, backend/interface.h, kernel/operator_registry.cpp of the same
# release), said for a user. Upstream's runner prints only the hex code ("failed
# with status 0x14"), so the name is looked up here too.
ET_ERROR_INFO: dict[int, EtErrorInfo] = {
    0x00: EtErrorInfo("Ok", "no error", ""),
    0x01: EtErrorInfo(
        "Internal", "an internal error in the runtime, a kernel or a delegate",
        "see the runner log for the component that failed; rerun to rule out a flaky device",
    ),
    0x02: EtErrorInfo(
        "InvalidState", "the method was used out of order, e.g. executed with an input not set",
        "give every method input (--inputs), and check the runner log for which step it refused",
    ),
    0x03: EtErrorInfo(
        "EndOfMethod", "execution stepped past the method's last instruction",
        "the program or the runtime is inconsistent; rebuild the .pte with the runner's executorch",
    ),
    0x04: EtErrorInfo(
        "AlreadyLoaded", "a resource was loaded twice", "see the runner log; report it if it repeats",
    ),
    0x10: EtErrorInfo(
        "NotSupported",
        "the program uses something this runtime or a delegate does not support (a dtype, a "
        "dynamic shape, an option)",
        "lower for a backend the runner has, or build the runner against the executorch that "
        "built the .pte",
    ),
    0x11: EtErrorInfo(
        "NotImplemented", "a kernel or delegate has no implementation for this case",
        "see the runner log for the operator; lower it for another backend or use other dtypes",
    ),
    0x12: EtErrorInfo(
        "InvalidArgument",
        "an argument was rejected: most often an input of another shape, dtype or size than "
        "the method takes, or a dynamic dim beyond its exported bound",
        "check each input against the method's signature (etdeploy build prints it); keep "
        "dynamic dims within the bounds given at export",
    ),
    0x13: EtErrorInfo(
        "InvalidType", "a value has another type than the operation needs",
        "the method takes a non-tensor input or output this runner cannot feed; export a "
        "wrapper whose inputs are tensors",
    ),
    0x14: EtErrorInfo(
        "OperatorMissing",
        "the program calls an operator no kernel library in the runner registers (for these "
        "dtypes)",
        "build the runner with the library that provides it (etdeploy runner build --kernels "
        "...), or lower with a partitioner that covers it; etdeploy doctor --pte PTE --device "
        "NAME names what is missing",
    ),
    0x15: EtErrorInfo(
        "RegistrationExceedingMaxKernels",
        "the kernel libraries register more kernels than the runtime's registry holds",
        "link fewer kernel libraries, or build ExecuTorch with a larger -DMAX_KERNEL_NUM",
    ),
    0x16: EtErrorInfo(
        "RegistrationAlreadyRegistered", "two linked libraries register the same kernel",
        "link each kernel library once (a custom library must not repeat a built-in kernel)",
    ),
    0x20: EtErrorInfo(
        "NotFound",
        "something the program names is not there: most often a delegate the runner does not "
        "link (Backend ... is not registered), else a method or an external data key",
        "build the runner with that backend (etdeploy runner build --backends ...) or lower "
        "for one it has; check the method name",
    ),
    0x21: EtErrorInfo(
        "MemoryAllocationFailed",
        "the device ran out of memory for the method's planned arenas or a delegate's buffers",
        "free memory on the device, or shrink the model (quantize, smaller inputs)",
    ),
    0x22: EtErrorInfo(
        "AccessFailed",
        "a file could not be opened, read or mapped: the .pte, its .ptd or an input",
        "check the path exists on the device and is readable by the runner (and that the "
        "device has free space)",
    ),
    0x23: EtErrorInfo(
        "InvalidProgram",
        "the .pte is malformed: truncated, corrupt, or from an ExecuTorch this runtime cannot read",
        "the .pte is truncated, corrupt, or from another ExecuTorch version; rebuild it, and "
        "check the copy on the device is whole",
    ),
    0x24: EtErrorInfo(
        "InvalidExternalData",
        "the external data (.ptd) is missing, corrupt or does not match the program",
        "push the .ptd the program was built with, whole",
    ),
    0x25: EtErrorInfo(
        "OutOfResources", "the runtime ran out of a fixed resource (threads, handles, slots)",
        "see the runner log for which; lower --cpu-threads or the model's size",
    ),
    0x30: EtErrorInfo(
        "DelegateInvalidCompatibility",
        "a delegate blob was written for another version or configuration of its backend",
        "rebuild the .pte with the executorch the runner was built against",
    ),
    0x31: EtErrorInfo(
        "DelegateMemoryAllocationFailed", "a delegate could not allocate memory for its blob",
        "free memory on the device, or shrink the delegated part of the model",
    ),
    0x32: EtErrorInfo(
        "DelegateInvalidHandle", "a delegate's handle was invalid at execute (its init failed)",
        "see the runner log for the delegate's own error at load",
    ),
}  # fmt: skip
ET_ERRORS: dict[int, str] = {code: info.name for code, info in ET_ERROR_INFO.items()}
