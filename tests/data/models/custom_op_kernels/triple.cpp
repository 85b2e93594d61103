// The ExecuTorch kernel for etdeploy_custom::triple.out (tests/data/models/
// custom_op.py): out = 3 * x. A user's custom-operator kernel library in
// miniature: built against the installed executorch's headers and runtime, it
// registers itself from a static initializer when loaded, and
// `etdeploy runner build --kernels PATH` links it into the runner.
//
// It registers the kernel for one kernel key only, float32 in and out with a
// 2-D contiguous dim order, as a dtype-selective build would (KernelKey in
// runtime/kernel/operator_registry.h: "v1/<dtype>;<dim order>|..." per tensor
// argument, ScalarType::Float = 6). The runtime then serves a call only when
// the key it computes for the call's tensors equals this one, so tests can hold
// preflight's kernel keys against the runtime's: a 2-D float program loads, a
// 3-D one is refused by both.

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>
#include <executorch/runtime/kernel/operator_registry.h>

namespace {

using executorch::aten::ScalarType;
using executorch::aten::Tensor;
using executorch::runtime::KernelRuntimeContext;

Tensor& triple_out(KernelRuntimeContext& context, const Tensor& x, Tensor& out) {
  ET_KERNEL_CHECK(context, x.scalar_type() == ScalarType::Float &&
                               out.scalar_type() == ScalarType::Float,
                  InvalidArgument, out);
  ET_KERNEL_CHECK(context, executorch::runtime::resize_tensor(out, x.sizes()) ==
                               executorch::runtime::Error::Ok,
                  InvalidArgument, out);
  const float* in = x.const_data_ptr<float>();
  float* result = out.mutable_data_ptr<float>();
  for (executorch::aten::SizesType i = 0; i < x.numel(); ++i) {
    result[i] = 3.0f * in[i];
  }
  return out;
}

constexpr char kName[] = "etdeploy_custom::triple.out";
// x, out, and the returned value (the same tensor as out): three tensor args.
constexpr char kFloat2d[] = "v1/6;0,1|6;0,1|6;0,1";

const auto registered = executorch::runtime::register_kernel(executorch::runtime::Kernel(
    kName, executorch::runtime::KernelKey(kFloat2d),
    executorch::extension::WrapUnboxedIntoFunctor<
        decltype(EXECUTORCH_FN(triple_out, kName))>::call));

}  // namespace
