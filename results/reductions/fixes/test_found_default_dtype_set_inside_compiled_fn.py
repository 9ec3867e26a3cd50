# Owner(s): ["module: dynamo"]
# Regression test, in the style of test/dynamo/test_misc.py, for torch.set_default_dtype called inside a
# compiled function: the ops after it read the default dtype when they run (the result dtype of an integer
# division, of an integer tensor times a Python float), so they must run under the dtype the function set,
# on every backend.
import torch
import torch._dynamo.test_case


def halve_in_float64(x):
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        return x / 2, x * 1.5
    finally:
        torch.set_default_dtype(before)


class SetDefaultDtypeInsideTests(torch._dynamo.test_case.TestCase):
    def _check(self, backend):
        x = torch.arange(6)
        expected = halve_in_float64(x)
        self.assertEqual([t.dtype for t in expected], [torch.float64, torch.float64])
        compiled = torch.compile(halve_in_float64, backend=backend)
        for _ in range(2):  # the compile, then the cached program
            self.assertEqual(compiled(x), expected, exact_dtype=True)
            self.assertEqual(torch.get_default_dtype(), torch.float32)

    def test_set_default_dtype_inside_aot_eager(self):
        self._check("aot_eager")

    def test_set_default_dtype_inside_inductor(self):
        self._check("inductor")

    def test_set_default_dtype_inside_eager_backend(self):
        # the FX graph itself calls the setter: right before the fix too
        self._check("eager")


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
