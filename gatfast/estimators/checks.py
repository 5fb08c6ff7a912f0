"""Which of scikit-learn's estimator checks apply to gatfast's estimators, and why some do not.

``tests/test_sklearn.py`` runs ``check_estimator`` on :class:`GATv2Classifier`
and asserts that exactly the checks below fail (and every other one
passes), then tests the same properties on node-id data itself; it runs the
checks of :data:`GRAPH_API_CHECKS` on :class:`GATv2GraphClassifier`.
"""

__all__ = ["GRAPH_API_CHECKS", "NODE_EXPECTED_FAILED_CHECKS", "RANDOM_FEATURES"]

#: The one reason: these checks build their own data, a random matrix of
#: float features (several columns, or values that are not whole numbers).
RANDOM_FEATURES = (
    "feeds a random float feature matrix as X; GATv2Classifier's X holds node ids (one integer column, "
    "the features are the node_features parameter), so the data is refused before the check starts; "
    "tests/test_sklearn.py tests the property on node ids"
)

#: ``{check name: reason}`` for ``check_estimator(..., expected_failed_checks=...)``.
NODE_EXPECTED_FAILED_CHECKS = dict.fromkeys(
    [
        "check_classifier_data_not_an_array",
        "check_classifiers_classes",
        "check_classifiers_train",
        "check_decision_proba_consistency",
        "check_dict_unchanged",
        "check_dont_overwrite_parameters",
        "check_dtype_object",
        "check_estimators_dtypes",
        "check_estimators_fit_returns_self",
        "check_estimators_nan_inf",
        "check_estimators_overwrite_params",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_fit2d_1feature",
        "check_fit2d_predict1d",
        "check_fit_check_is_fitted",
        "check_fit_idempotent",
        "check_fit_score_takes_y",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_n_features_in",
        "check_n_features_in_after_fitting",
        "check_pipeline_consistency",
        "check_readonly_memmap_input",
        "check_supervised_y_2d",
    ],
    RANDOM_FEATURES,
)

#: The checks of ``check_estimator`` that need no data (API, parameters,
#: tags, not-fitted errors), run one by one on GATv2GraphClassifier, whose X
#: (a list of graphs) makes ``check_estimator`` skip it as a whole.
GRAPH_API_CHECKS = (
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_estimator_tags_renamed",
    "check_estimators_unfitted",
    "check_get_params_invariance",
    "check_mixin_order",
    "check_no_attributes_set_in_init",
    "check_parameters_default_constructible",
    "check_set_params",
    "check_valid_tag_types",
)
