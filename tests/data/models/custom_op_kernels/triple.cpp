// The ExecuTorch kernel for etdeploy_custom::triple.out (tests/data/models/
// custom_op.py): out = 3 * x for float32 tensors. A user's custom-operator kernel
// library in miniature: built against the installed executorch's headers and
// runtime, it registers itself from a static initializer when loaded, and
// `etdeploy runner build --kernels PATH` links it into the runner.

#include <executorch/extension/kernel_util/make_boxed_from_unboxed_functor.h>
#include <executorch/runtime/core/exec_aten/exec_aten.h>
#include <executorch/runtime/core/exec_aten/util/tensor_util.h>
#include <executorch/runtime/kernel/kernel_runtime_context.h>

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

}  // namespace

EXECUTORCH_LIBRARY(etdeploy_custom, "triple.out", triple_out);
