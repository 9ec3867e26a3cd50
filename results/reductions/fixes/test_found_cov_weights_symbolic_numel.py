# Owner(s): ["module: dynamic shapes"]
# Regression test, in the style of test/dynamo/test_misc.py, for torch.cov's weights under symbolic
# sizes: its kernel checks that each weight vector has one entry an observation, which must hold when
# Dynamo traces the op with the observation count symbolic (automatic dynamic shapes after a size
# change, or dynamic=True), and must still refuse weights of another size.
import torch
import torch._dynamo.test_case
import torch._dynamo.testing


def weighted_cov(x, fweights, aweights):
    return torch.cov(x, fweights=fweights, aweights=aweights)


def weights(observations):
    fweights = torch.randint(1, 4, (observations,))
    aweights = torch.rand(observations) + 0.5
    return (fweights, None), (None, aweights), (fweights, aweights)


class CovWeightsSymbolicSizesTests(torch._dynamo.test_case.TestCase):
    def test_cov_weights_after_the_observation_count_changes(self):
        # a new size recompiles with that size symbolic (automatic dynamic shapes)
        for given in range(3):
            torch._dynamo.reset()
            compiled = torch.compile(weighted_cov, backend="eager")
            for observations in (4, 5, 6):
                x = torch.randn(3, observations)
                fweights, aweights = weights(observations)[given]
                self.assertEqual(compiled(x, fweights, aweights), weighted_cov(x, fweights, aweights))

    def test_cov_weights_dynamic(self):
        for observations in (4, 7):
            x = torch.randn(2, observations)
            for fweights, aweights in weights(observations):
                torch._dynamo.reset()
                compiled = torch.compile(weighted_cov, backend="aot_eager", dynamic=True)
                self.assertEqual(compiled(x, fweights, aweights), weighted_cov(x, fweights, aweights))

    def test_cov_refuses_weights_of_another_size_under_dynamic(self):
        compiled = torch.compile(weighted_cov, backend="eager", dynamic=True)
        x = torch.randn(3, 5)
        with self.assertRaisesRegex(Exception, "same numel as there are observations"):
            compiled(x, torch.ones(4, dtype=torch.int64), None)
        with self.assertRaisesRegex(Exception, "same numel as there are observations"):
            compiled(x, None, torch.ones(6))


if __name__ == "__main__":
    from torch._dynamo.test_case import run_tests

    run_tests()
