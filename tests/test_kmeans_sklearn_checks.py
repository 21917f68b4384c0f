"""scikit-learn's estimator checks on GPUKMeans(device="cpu")."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from gpumine import GPUKMeans

# Same expected failure as sklearn.cluster.KMeans declares for itself: the init
# draws random numbers per sample, so weights are not the same as repeated rows.
EXPECTED_FAILURES = {
    "check_sample_weight_equivalence_on_dense_data":
        "sample_weight is not equivalent to removing/repeating samples: the random init "
        "draws per sample (scikit-learn's KMeans lists the same expected failure)",
}


@parametrize_with_checks([GPUKMeans(device="cpu")],
                         expected_failed_checks=lambda est: EXPECTED_FAILURES)
def test_sklearn_compatible(estimator, check):
    check(estimator)
