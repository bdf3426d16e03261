"""Eq. 5 generalised, and the mesh built from it."""

import jax
import pytest

from hpcai_jax.axes import DATA, ENSEMBLE, MODEL
from hpcai_jax.config import MeshConfig
from hpcai_jax.engine.mesh import make_mesh, resolve_layout
from hpcai_jax.errors import UsageError


@pytest.mark.parametrize(
    "m,mpd,p,expected",
    [
        (4, 1, 2, (4, 1, 2)),
        (4, 2, 4, (4, 2, 4)),
        (8, None, None, (8, 8, 8)),  # P_degree = local device count, members per device derived
        (2, None, 4, (2, 1, 4)),
        (16, None, 1, (16, 2, 1)),
    ],
)
def test_resolve_layout(m, mpd, p, expected):
    layout = resolve_layout(MeshConfig(m, mpd, p), num_devices=8, local_device_count=8)
    assert (layout.ensemble_size, layout.members_per_device, layout.parallel_degree) == expected
    assert layout.ensemble_axis_size * layout.parallel_degree == 8


@pytest.mark.parametrize(
    "m,mpd,p,message",
    [
        (
            4,
            1,
            4,
            r"Eq. 5 fails: \(--ensemble_size=4 / --members_per_device=1\) × --parallel_degree=4 = 16, but there are 8 devices",
        ),
        (
            3,
            None,
            2,
            r"--ensemble_size=3 × --parallel_degree=2 = 6 member-replicas cannot be spread evenly over 8 devices",
        ),
        (4, 3, 2, r"--members_per_device=3 must divide --ensemble_size=4"),
        (
            4,
            None,
            7,  # auto once derived 28 members per device and blamed that on M
            r"^--parallel_degree=7: each member spans 7 devices, which must divide the 8 devices; "
            r"--parallel_degree can be 1, 2, 4 or 8 here$",
        ),
        (4, 1, 3, r"^--parallel_degree=3: each member spans 3 devices, which must divide the 8"),
    ],
)
def test_mismatch_shows_the_arithmetic(m, mpd, p, message):
    with pytest.raises(UsageError, match=message):
        resolve_layout(MeshConfig(m, mpd, p), num_devices=8, local_device_count=8)


def test_a_member_wider_than_the_devices_says_so_in_their_numbers():
    with pytest.raises(UsageError) as refused:
        resolve_layout(MeshConfig(4, None, 7), num_devices=1, local_device_count=1)
    assert str(refused.value) == (
        "--parallel_degree=7: each member spans 7 devices, which must divide the 1 device; "
        "--parallel_degree can be 1 here"
    )
    with pytest.raises(UsageError, match=r"^--parallel_degree=3 × --model_parallel=2: each "):
        resolve_layout(
            MeshConfig(4, None, 3, model_parallel=2), num_devices=8, local_device_count=8
        )


def test_mesh_axes_and_order():
    layout = resolve_layout(MeshConfig(4, 1, 2), 8, 8)
    mesh = make_mesh(layout)
    assert dict(mesh.shape) == {ENSEMBLE: 4, DATA: 2, MODEL: 1}
    assert mesh.devices.size == len(jax.devices())


@pytest.mark.parametrize(
    "m,mpd,p,pm,expected",
    [
        (2, 1, 2, 2, (2, 1, 2)),  # ensemble 2 × data 2 × model 2
        (4, None, None, 2, (4, 1, 4)),  # P_degree = local devices / P_model = 4; 4 × 4 × 2 = 32 / 1
        (2, None, 1, 4, (2, 1, 1)),
    ],
)
def test_model_parallel_enters_eq_5(m, mpd, p, pm, expected):
    devices = 32 if (m, p, pm) == (4, None, 2) else 8
    layout = resolve_layout(MeshConfig(m, mpd, p, model_parallel=pm), devices, 8)
    assert (layout.ensemble_size, layout.members_per_device, layout.parallel_degree) == expected
    assert layout.ensemble_axis_size * layout.parallel_degree * pm == devices
    assert layout.devices_per_member == layout.parallel_degree * pm


def test_model_axis_is_innermost():
    mesh = make_mesh(resolve_layout(MeshConfig(2, 1, 2, model_parallel=2), 8, 8))
    assert dict(mesh.shape) == {ENSEMBLE: 2, DATA: 2, MODEL: 2}
    ids = [[[d.id for d in row] for row in plane] for plane in mesh.devices]
    assert ids[0][0] == [0, 1] and ids[0][1] == [2, 3] and ids[1][0] == [4, 5]


def test_a_layout_that_does_not_fill_the_devices_names_eq5_and_the_flags_that_fit():
    """M × P_degree × P_model must equal the devices unless members are asked to share them
    (--members_per_device=auto, or a number): no silent sharing."""
    with pytest.raises(UsageError) as refused:
        resolve_layout(MeshConfig(4, 1, 4), num_devices=8, local_device_count=8)
    assert str(refused.value) == (
        "Eq. 5 fails: (--ensemble_size=4 / --members_per_device=1) × --parallel_degree=4 = 16, "
        "but there are 8 devices; to fit: --members_per_device=2 (or auto: members share "
        "devices), or --parallel_degree=2, or --ensemble_size=2"
    )
    shared = resolve_layout(MeshConfig(4, None, 4), num_devices=8, local_device_count=8)  # auto
    assert (shared.members_per_device, shared.ensemble_axis_size) == (2, 2)
    with pytest.raises(UsageError, match="--members_per_device=3 \\(or auto"):
        resolve_layout(MeshConfig(3), num_devices=8, local_device_count=8)  # P_degree 8


def test_members_per_device_takes_a_number_or_auto():
    from hpcai_jax import flags as hflags

    hflags.FLAGS(["prog", "--members_per_device=auto"])
    try:
        assert hflags.build_config().mesh.members_per_device is None
        hflags.FLAGS(["prog", "--members_per_device=some"])
        with pytest.raises(
            UsageError, match=r"^--members_per_device=some: expected a number or auto$"
        ):
            hflags.build_config()
    finally:
        hflags.FLAGS.unparse_flags()
