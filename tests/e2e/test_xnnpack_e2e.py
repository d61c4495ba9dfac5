"""A program delegated to XNNPACK (the executorch wheel's backend) deploys and predicts like
eager PyTorch, through a real server with its default backends."""

import numpy as np
import torch

from support.foreign_delegate import serve_xnnpack_linear, xnnpack_linear_model


def test_an_xnnpack_program_deploys_and_matches_eager_pytorch(shared_server, programs_dir):
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = xnnpack_linear_model()(x).numpy()
    with shared_server.client() as client:
        output = serve_xnnpack_linear(client, programs_dir, x)
    assert output["shape"] == [2, 3]
    np.testing.assert_allclose(
        np.array(output["data"]).reshape(2, 3), expected, rtol=1e-5, atol=1e-6
    )
