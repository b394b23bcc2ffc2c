"""Install clear: IMPALA with CLEAR replay, PPG and SAC in TF2 / Sonnet 2."""

import os

import setuptools

# Which TensorFlow wheel: tensorflow-cpu by default (CI, laptops, actor
# machines). A GPU learner installs with CLEAR_TENSORFLOW='tensorflow[and-cuda]'
# (TensorFlow with its CUDA libraries from PyPI); see the README.
TENSORFLOW_WHEELS = ('tensorflow-cpu', 'tensorflow', 'tensorflow[and-cuda]')
TENSORFLOW = os.environ.get('CLEAR_TENSORFLOW', 'tensorflow-cpu')
if TENSORFLOW not in TENSORFLOW_WHEELS:
  raise SystemExit(f'CLEAR_TENSORFLOW={TENSORFLOW!r}: use one of '
                   f'{", ".join(TENSORFLOW_WHEELS)}.')

# Version ranges checked to resolve together in a fresh Python 3.11 venv.
INSTALL_REQUIRES = [
    f'{TENSORFLOW}>=2.21,<2.22',
    # TF 2.21 no longer pulls TensorBoard in; tf.summary needs it.
    'tensorboard>=2.21,<2.22',
    'dm-sonnet==2.0.2',
    'dm-tree>=0.1.8,<0.2',
    'absl-py>=2.1,<3',
    'numpy>=2.0,<3',
    'gymnasium>=1.0,<2',
    'ale-py>=0.10,<0.13',  # Atari ROMs ship inside the wheel.
    'opencv-python-headless>=4.9,<6',
    'pysc2==4.0.0',  # imported through envs.pysc2_compat
    's2clientprotocol>=5.0,<6',
    'psutil>=5.9,<8',
    # Student t quantiles (clear.continual.seed_stats), trimmed means
    # (clear.continual.aggregate).
    'scipy>=1.11,<2',
]

# MinAtar's games need only numpy, but the package declares matplotlib,
# seaborn, pandas and scipy (for drawing boards), so it stays an extra,
# imported only by processes that build a MinAtar env.
MINATAR_REQUIRES = ['minatar>=1.0.15,<1.1']

PLOT_REQUIRES = ['matplotlib>=3.8,<4', 'pillow>=10,<14']

RAY_REQUIRES = ['ray>=2.60,<2.61']

# A minor version of ruff may add checks: pinned, so CI's lint is stable.
LINT_REQUIRES = ['ruff>=0.17,<0.18']

EXTRAS_REQUIRE = {
    'ray': RAY_REQUIRES,
    # The tests render figures, record GIFs and play MinAtar too, so they
    # need the plot and minatar extras' packages.
    'test': ['pytest>=8,<10', 'pytest-xdist>=3.5,<4', *LINT_REQUIRES,
             *PLOT_REQUIRES, *MINATAR_REQUIRES],
    # The lint step of .ci/run (ruff.toml).
    'lint': LINT_REQUIRES,
    # python -m clear.study runs its runs on Ray and draws figures. Its
    # aggregates
    # (clear.continual.aggregate) are rliable's statistics written on
    # numpy and scipy: rliable 1.2 needs arch < 8, and arch 7 fails to
    # import with pandas 3.
    'study': [*RAY_REQUIRES, *PLOT_REQUIRES],
    # Figures (clear.plot) and GIFs of episodes (--record).
    'plot': PLOT_REQUIRES,
    'minatar': MINATAR_REQUIRES,
}

setuptools.setup(
    name='clear-rl',
    version='0.1.0',
    description=('IMPALA with CLEAR replay (V-trace, policy and value '
                 'cloning), PPG and SAC in TensorFlow 2 and Sonnet 2.'),
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    license='Apache-2.0',
    packages=setuptools.find_packages(include=['clear', 'clear.*', 'agents',
                                               'agents.*', 'envs', 'envs.*']),
    python_requires='>=3.10,<3.13',
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
