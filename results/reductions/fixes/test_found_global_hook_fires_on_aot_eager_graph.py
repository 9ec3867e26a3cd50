# Owner(s): ["module: dynamo"]
# Regression test, in the style of test/dynamo/test_hooks.py, for a global forward hook
# (torch.nn.modules.module.register_module_forward_hook) around a function compiled with backend="aot_eager":
# the hook must see what eager shows it, the modules the function calls with their outputs, and never
# AOTAutograd's compiled graph, a GraphModule that aot_eager's boxed_nop runs through nn.Module.__call__.
import torch
import torch._dynamo.test_case


class GlobalForwardHookAotEagerTests(torch._dynamo.test_case.TestCase):
    def _run(self, hook, backend):
        layer, x = torch.nn.Linear(4, 4), torch.randn(2, 4)
        handle = torch.nn.modules.module.register_module_forward_hook(hook)
        try:
            compiled = torch.compile(lambda x: layer(x) + 1, backend=backend)
            return [compiled(x) for _ in range(2)], layer(x) + 1
        finally:
            handle.remove()

    def test_hook_reading_the_output_aot_eager(self):
        # a hook that checks outputs for NaN, as a debugging session registers one (it breaks Dynamo's graph)
        def nan_check(module, args, output):
            if not torch.isfinite(output).all():
                raise AssertionError(f"non-finite output in {module}")

        got, expected = self._run(nan_check, "aot_eager")
        for out in got:
            self.assertEqual(out, expected)

    def _modules_the_hook_saw(self, backend):
        seen = []

        @torch._dynamo.disable
        def record(module, args, output):
            seen.append(type(module).__name__)

        self._run(record, backend)
        return seen

    def test_hook_sees_only_the_users_modules_aot_eager(self):
        self.assertEqual(self._modules_the_hook_saw("aot_eager"), ["Linear", "Linear", "Linear"])

    def test_hook_sees_only_the_users_modules_inductor(self):
        # inductor's compiled code is no module: right before the fix too
        self.assertEqual(self._modules_the_hook_saw("inductor"), ["Linear", "Linear", "Linear"])


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
