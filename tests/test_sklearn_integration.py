"""GPUKMeans and WaveCluster inside scikit-learn pipelines, with pandas, and pickled."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from gpumine import GPUKMeans, WaveCluster


@pytest.fixture
def frame(rng):
    centres = np.array([[0, 0], [10, 10], [0, 10]], dtype=float)
    labels = rng.randint(0, 3, 900)
    points = centres[labels] + rng.normal(0, 0.5, (900, 2))
    return pd.DataFrame({"x": points[:, 0], "y": points[:, 1],
                         "colour": rng.choice(["red", "blue"], 900)}), labels


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_pipeline_with_scaler(frame, device):
    df, truth = frame
    from sklearn.metrics import adjusted_rand_score

    for model in (GPUKMeans(3, random_state=0, device=device), WaveCluster(device=device)):
        pipe = Pipeline([("scale", StandardScaler()), ("cluster", model)])
        labels = pipe.fit_predict(df[["x", "y"]])
        assert adjusted_rand_score(truth, labels) > 0.95, type(model).__name__
        np.testing.assert_array_equal(pipe.predict(df[["x", "y"]]), labels)


def test_column_transformer_and_pandas_output(frame):
    df, _ = frame
    pre = ColumnTransformer([("num", StandardScaler(), ["x", "y"]),
                             ("cat", OneHotEncoder(sparse_output=False), ["colour"])])
    pipe = Pipeline([("pre", pre), ("kmeans", GPUKMeans(3, random_state=0, device="cpu"))])
    pipe.set_output(transform="pandas")
    distances = pipe.fit_transform(df)
    assert isinstance(distances, pd.DataFrame)
    assert distances.columns.tolist() == ["gpukmeans0", "gpukmeans1", "gpukmeans2"]
    assert pipe.named_steps["kmeans"].feature_names_in_.tolist() == [
        "num__x", "num__y", "cat__colour_blue", "cat__colour_red"]
    wave = Pipeline([("pre", ColumnTransformer([("num", StandardScaler(), ["x", "y"])])),
                     ("wave", WaveCluster(device="cpu"))]).fit(df)
    assert wave.named_steps["wave"].n_clusters_ == 3


@pytest.mark.parametrize("device", ["cpu", pytest.param("gpu", marks=pytest.mark.gpu)])
def test_pickle_fitted_estimators(frame, device):
    df, _ = frame
    X = df[["x", "y"]]
    for model in (GPUKMeans(3, random_state=0, device=device), WaveCluster(device=device)):
        model.fit(X)
        restored = pickle.loads(pickle.dumps(model))
        np.testing.assert_array_equal(restored.predict(X), model.predict(X))
        np.testing.assert_array_equal(restored.labels_, model.labels_)
