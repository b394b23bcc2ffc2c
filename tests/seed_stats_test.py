"""Tests for clear.continual.seed_stats: the t quantile, intervals, label
groups, mean curves and the per-method table, against hand-computed values."""

import math

import numpy as np
import pytest

from clear.continual import seed_stats

# --- Student t ----------------------------------------------------------------


@pytest.mark.parametrize('dof, expected', [
    # Two-sided 95% critical values, as printed in t tables.
    (1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571),
    (9, 2.262), (10, 2.228), (29, 2.045), (30, 2.042), (120, 1.980)])
def test_t_quantile_matches_the_printed_table(dof, expected):
  assert seed_stats.t_quantile(0.975, dof) == pytest.approx(expected,
                                                            abs=5e-4)
  assert seed_stats.t_quantile(0.025, dof) == pytest.approx(-expected,
                                                            abs=5e-4)


@pytest.mark.parametrize('p', [0.6, 0.9, 0.95, 0.975, 0.995, 0.2, 0.01])
def test_t_quantile_matches_the_closed_forms(p):
  # One degree of freedom is Cauchy's distribution; two have the quantile
  # (2p - 1) / sqrt(2 p (1 - p)).
  assert seed_stats.t_quantile(p, 1) == pytest.approx(
      math.tan(math.pi * (p - 0.5)), rel=1e-10)
  assert seed_stats.t_quantile(p, 2) == pytest.approx(
      (2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-10)


def test_t_quantile_limits_and_validation():
  # Many degrees of freedom: the normal distribution's 1.959964.
  assert seed_stats.t_quantile(0.975, 5000) == pytest.approx(1.9604,
                                                             abs=1e-4)
  assert seed_stats.t_quantile(0.5, 3) == 0.0
  assert seed_stats.t_quantile(np.float64(0.975), np.int64(2)) == (
      pytest.approx(4.302653, abs=1e-6))
  for bad in (0, -1, 1.5, True):
    with pytest.raises(ValueError, match='degrees of freedom'):
      seed_stats.t_quantile(0.975, bad)
  for bad in (0.0, 1.0, -0.5, 2.0):
    with pytest.raises(ValueError, match='p must be in'):
      seed_stats.t_quantile(bad, 3)


def test_mean_interval_hand_computed():
  # [1, 2, 3]: mean 2, s = 1, half-width t_{.975, 2} / sqrt(3).
  interval = seed_stats.mean_interval([1, 2, 3])
  assert interval.mean == 2.0 and interval.n == 3
  assert interval.half_width == pytest.approx(4.302653 / math.sqrt(3),
                                              rel=1e-6)
  assert interval.half_width == pytest.approx(2.4841, abs=1e-4)
  # Two seeds, 0 and 2: s = sqrt(2), half-width t_{.975, 1} sqrt(2) / sqrt(2).
  assert seed_stats.mean_interval([0.0, 2.0]).half_width == pytest.approx(
      12.7062, abs=1e-4)
  assert seed_stats.mean_interval([5.0, 5.0, 5.0]).half_width == 0.0
  one = seed_stats.mean_interval([0.25])
  assert (one.mean, one.half_width, one.n) == (0.25, None, 1)
  assert seed_stats.mean_interval([]) == (None, None, ())


# --- Labels -------------------------------------------------------------------


def test_group_labels_in_order_of_first_appearance():
  labels = ['impala_s1', 'clear_s0', 'impala_s0', 'online_ewc_s2',
            'clear_s1', 'replay75_s10']
  groups = seed_stats.group_labels(labels, '--group_seeds')
  assert list(groups) == ['impala', 'clear', 'online_ewc', 'replay75']
  assert groups == {'impala': [0, 2], 'clear': [1, 4], 'online_ewc': [3],
                    'replay75': [5]}
  assert seed_stats.parse_label('online_ewc_s2', '--x') == ('online_ewc', 2)


@pytest.mark.parametrize('label', ['clear', 'clear_0', 'clear_sx', '_s1',
                                   'clear_s', 'clear_s1 ', 'clear-s1'])
def test_a_bad_label_names_the_flag_and_the_label(label):
  with pytest.raises(ValueError) as error:
    seed_stats.group_labels(['clear_s0', label], '--group_seeds')
  message = str(error.value)
  assert message.startswith('--group_seeds needs run labels <method>_s<seed>')
  assert repr(label) in message


def test_a_seed_given_twice_is_refused():
  with pytest.raises(ValueError, match=r"--table_out: 'clear_s00' names seed "
                     r"0 of 'clear' again \(as 'clear_s0'\)"):
    seed_stats.group_labels(['clear_s0', 'impala_s0', 'clear_s00'],
                            '--table_out')


# --- Curves -------------------------------------------------------------------


def test_mean_curve_on_shared_frames():
  steps = np.array([0, 100, 200])
  curve = seed_stats.mean_curve([(steps, np.array([1.0, 4.0, 0.0])),
                                 (steps, np.array([3.0, 4.0, 2.0]))])
  np.testing.assert_array_equal(curve.steps, steps)
  np.testing.assert_allclose(curve.mean, [2.0, 4.0, 1.0])
  # s = sqrt(2), 0, sqrt(2): half-widths 12.706 * s / sqrt(2).
  np.testing.assert_allclose(curve.half_width, [12.7062, 0.0, 12.7062],
                             atol=1e-4)
  assert curve.num_seeds == 2


def test_mean_curve_aligns_different_frames():
  # The second seed stops at 150 and evaluated at 50 and 150: the union of
  # the frames within [0, 150], the first seed interpolated at 50 and 150.
  curve = seed_stats.mean_curve([
      (np.array([0, 100, 200]), np.array([0.0, 10.0, 20.0])),
      (np.array([0, 50, 150]), np.array([2.0, 2.0, 2.0]))])
  np.testing.assert_array_equal(curve.steps, [0, 50, 100, 150])
  np.testing.assert_allclose(curve.mean, [1.0, 3.5, 6.0, 8.5])
  single = seed_stats.mean_curve([(np.array([5]), np.array([1.5]))])
  assert single.mean.tolist() == [1.5] and np.isnan(single.half_width[0])
  with pytest.raises(ValueError, match='non-empty'):
    seed_stats.mean_curve([])
  with pytest.raises(ValueError, match='non-empty'):
    seed_stats.mean_curve([(np.array([], np.int64), np.array([]))])


# --- Table --------------------------------------------------------------------


def _run(final, visit, auc, cora):
  """A run's metrics with the keys the table reads; `cora` is {task:
  (scale, forgetting by segment, transfer by segment)}."""
  per_task = {task: {'cora_return_scale': scale,
                     'cora_isolated_forgetting_by_segment': forgetting,
                     'cora_zero_shot_transfer_by_segment': transfer}
              for task, (scale, forgetting, transfer) in cora.items()}
  return {'per_task': per_task,
          'average_normalized_final_return': final,
          'average_normalized_forgetting_per_visit': visit,
          'average_normalized_return_auc': auc,
          'average_final_return': 100 * final,
          'average_forgetting_per_visit': 100 * visit,
          'average_return_auc': 100 * auc}


def _metrics():
  return {
      'clear_s0': _run(0.6, 0.1, 0.5, {'A': (10.0, {'1': 0.4}, {}),
                                       'B': (4.0, {}, {'0': 0.5})}),
      'impala_s0': _run(0.3, 0.4, 0.2, {'A': (2.0, {'1': 0.5}, {})}),
      'clear_s1': _run(0.7, 0.2, 0.5, {'A': (5.0, {'1': 0.4}, {}),
                                       'B': (8.0, {}, {'0': 0.25})}),
      'clear_s2': _run(0.8, 0.3, 0.7, {'A': (10.0, {'1': 0.1}, {}),
                                        'B': (8.0, {}, {'0': 0.5})}),
  }


def test_seed_table_numbers():
  metrics = _metrics()
  metrics['clear_s2']['average_normalized_return_auc'] = None
  table = seed_stats.seed_table(metrics)
  assert table['normalized']
  assert list(table['methods']) == ['clear', 'impala']
  clear = table['methods']['clear']
  assert clear['seeds'] == ['clear_s0', 'clear_s1', 'clear_s2']
  assert clear['num_seeds'] == 3
  # Final return .6, .7, .8: mean .7, s = .1, t_{.975, 2} .1 / sqrt(3).
  final = clear['final_return']
  assert final['mean'] == pytest.approx(0.7)
  assert final['half_width'] == pytest.approx(0.24841377, rel=1e-6)
  assert final['low'] == pytest.approx(0.7 - 0.24841377, rel=1e-6)
  assert final['n'] == 3 and final['values'] == [0.6, 0.7, 0.8]
  assert clear['forgetting_per_visit']['mean'] == pytest.approx(0.2)
  # The area under the curve of two seeds: .5 and .5.
  auc = clear['return_auc']
  assert (auc['mean'], auc['half_width'], auc['n']) == (0.5, 0.0, 2)
  # CORA's numbers over the method's largest scales (A 10, B 8): A's
  # forgetting .4 * 10 / 10, .4 * 5 / 10, .1; B's transfer .5 * 4 / 8,
  # .25, .5.
  assert clear['isolated_forgetting']['values'] == pytest.approx(
      [0.4, 0.2, 0.1])
  assert clear['zero_shot_transfer']['values'] == pytest.approx(
      [0.25, 0.25, 0.5])
  assert clear['zero_shot_transfer']['mean'] == pytest.approx(1 / 3)
  # One seed: its numbers, no interval.
  impala = table['methods']['impala']
  assert impala['num_seeds'] == 1
  assert impala['final_return'] == {
      'mean': 0.3, 'half_width': None, 'low': None, 'high': None, 'n': 1,
      'values': [0.3]}
  assert impala['isolated_forgetting']['mean'] == pytest.approx(0.5)
  assert impala['zero_shot_transfer']['mean'] is None

  markdown = seed_stats.table_markdown(table).splitlines()
  assert markdown[0] == (
      '| method | seeds | normalised final return | normalised forgetting '
      'per visit | isolated forgetting (CORA) | zero-shot transfer (CORA) | '
      'normalised area under the curve |')
  assert markdown[2] == ('| clear | 3 | 0.700 ± 0.248 | 0.200 ± 0.248 | '
                         '0.233 ± 0.379 | 0.333 ± 0.359 | '
                         '0.500 ± 0.000 (2 of 3) |')
  assert markdown[3] == ('| impala | 1 | 0.300 | 0.400 | 0.500 | — | '
                         '0.200 |')
  assert markdown[-1].startswith('Table: Per method, the mean over seeds')
  assert 'Student\'s t distribution with n − 1 degrees of freedom' in (
      markdown[-1])
  # The hand-computed cells: s of (.4, .2, .1) and of (.25, .25, .5).
  assert 4.302653 * np.std([0.4, 0.2, 0.1], ddof=1) / math.sqrt(3) == (
      pytest.approx(0.379, abs=5e-4))
  assert 4.302653 * np.std([0.25, 0.25, 0.5], ddof=1) / math.sqrt(3) == (
      pytest.approx(0.359, abs=5e-4))


def test_seed_table_without_baselines_reads_returns():
  metrics = _metrics()
  del metrics['impala_s0']['average_normalized_final_return']
  table = seed_stats.seed_table(metrics)
  assert not table['normalized']
  assert table['columns'][0]['header'] == 'final return'
  assert table['methods']['clear']['final_return']['mean'] == (
      pytest.approx(70.0))
  assert 'in return units' in table['caption']


def test_seed_table_refuses_a_bad_label():
  metrics = _metrics()
  metrics['clear'] = metrics.pop('clear_s1')
  with pytest.raises(ValueError, match=r"--table_json needs run labels "
                     r"<method>_s<seed> .* got 'clear'"):
    seed_stats.seed_table(metrics, '--table_json')


def test_write_text_is_atomic(tmp_path):
  path = str(tmp_path / 'out' / 'table.md')
  seed_stats.write_text(path, 'a table\n')
  with open(path) as f:
    assert f.read() == 'a table\n'
  assert [p.name for p in (tmp_path / 'out').iterdir()] == ['table.md']


def test_seed_table_caption_names_the_cycles_cora_forgetting_counts():
  metrics = _metrics()
  assert 'later segment of the first cycle,' in (
      seed_stats.seed_table(metrics)['caption'])
  for run in metrics.values():
    run['cora_forgetting_cycles'] = 2
  assert 'later segment of the first 2 cycles,' in (
      seed_stats.seed_table(metrics)['caption'])
  metrics['clear_s1']['cora_forgetting_cycles'] = 1
  with pytest.raises(ValueError, match=r'--table_out: .* different numbers '
                     r'of cycles \(\[1, 2\]\)'):
    seed_stats.seed_table(metrics)
