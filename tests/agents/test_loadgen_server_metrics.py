"""vLLM's Prometheus metrics: parsing, baselines and deltas."""

from __future__ import annotations

import pytest

from agents.loadgen.server_metrics import MetricsScraper, Snapshot, parse_metrics

VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
vllm:num_requests_running{engine="1",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.75
vllm:num_preemptions_total{engine="0",model_name="tiny"} 4.0
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 250.0
vllm:prompt_tokens_total{engine="0",model_name="tiny"} 5000.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 640.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="tiny"} 9.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny"} 0.5
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny"} 10.0
vllm:cache_config_info{block_size="16",num_gpu_blocks="2048",engine="0"} 1.0
vllm:num_requests_running_but_not_this{model_name="tiny"} 99.0
process_cpu_seconds_total 12.5
"""


def test_it_reads_the_wanted_metrics_over_label_sets():
    snapshot = parse_metrics(VLLM_TEXT)
    assert snapshot.gauge("num_requests_running") == 5.0  # summed over engines
    assert snapshot.gauge("kv_cache_usage_perc") == 0.5  # averaged over engines
    assert snapshot.total("num_preemptions_total") == 4.0
    assert snapshot.num_gpu_blocks == 2048
    assert "time_to_first_token_seconds_bucket" not in snapshot.values


def test_it_falls_back_to_the_deprecated_kv_cache_gauge():
    snapshot = parse_metrics('vllm:gpu_cache_usage_perc{model_name="m"} 0.4\n')
    assert snapshot.gauge("kv_cache_usage_perc") == 0.4


def scraper_with(baseline: Snapshot, samples: list[Snapshot]) -> MetricsScraper:
    scraper = MetricsScraper(pool=None, path="/metrics")
    scraper._baseline = baseline
    scraper._samples = samples
    return scraper


def test_the_level_report_has_counter_deltas_gauge_stats_and_the_series():
    before = parse_metrics(VLLM_TEXT, now=100.0)
    during = [
        parse_metrics(VLLM_TEXT.replace("} 3.0", "} 7.0"), now=101.0),
        parse_metrics(VLLM_TEXT.replace("} 0.25", "} 0.65"), now=102.0),
    ]
    after = parse_metrics(
        VLLM_TEXT.replace("} 4.0", "} 6.0")
        .replace("} 1000.0", "} 1400.0")
        .replace("} 250.0", "} 550.0")
        .replace('_sum{engine="0",model_name="tiny"} 0.5', '_sum{model_name="tiny"} 2.5')
        .replace('_count{engine="0",model_name="tiny"} 10.0', '_count{model_name="t"} 20.0'),
        now=103.0,
    )
    report = scraper_with(before, during)._report(after)
    assert report["num_preemptions"] == 2.0
    assert report["prefix_cache_queries"] == 400.0
    assert report["prefix_cache_hits"] == 300.0
    assert report["prefix_cache_hit_rate"] == 0.75
    assert report["server_mean_ttft_ms"] == pytest.approx(200.0)  # 2 s over 10 requests
    assert report["num_requests_running"] == {"max": 9.0, "mean": 7.0}
    assert report["kv_cache_usage_perc"]["max"] == pytest.approx(0.7)
    assert [point["t"] for point in report["series"]] == [1.0, 2.0]
    assert report["num_gpu_blocks"] == 2048


def test_a_counter_that_went_down_means_a_restart_and_counts_from_zero():
    before = parse_metrics("vllm:num_preemptions_total 50\n")
    after = parse_metrics("vllm:num_preemptions_total 3\n")
    assert scraper_with(before, [])._report(after)["num_preemptions"] == 3.0


def test_without_any_scrape_the_report_says_nothing_was_seen():
    report = scraper_with(None, [])._report(None)
    assert report["num_preemptions"] is None
    assert report["kv_cache_usage_perc"] is None
    assert report["series"] == []


SPEC_TEXT = """\
vllm:spec_decode_num_drafts_total{{engine="0",model_name="m"}} {drafts}
vllm:spec_decode_num_draft_tokens_total{{engine="0",model_name="m"}} {proposed}
vllm:spec_decode_num_accepted_tokens_total{{engine="0",model_name="m"}} {accepted}
vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="0"}} 999
"""


def test_the_level_report_has_the_speculative_acceptance_rate_over_the_level():
    before = parse_metrics(SPEC_TEXT.format(drafts=10, proposed=30, accepted=12))
    after = parse_metrics(SPEC_TEXT.format(drafts=110, proposed=330, accepted=192))
    report = scraper_with(before, [])._report(after)
    assert report["spec_decode_num_draft_tokens"] == 300.0
    assert report["spec_decode_num_accepted_tokens"] == 180.0  # the per-position line not read
    assert report["spec_decode_acceptance_rate"] == pytest.approx(0.6)
    assert report["spec_decode_mean_acceptance_length"] == pytest.approx(2.8)


def test_without_speculative_decoding_there_is_no_acceptance_rate():
    report = scraper_with(parse_metrics(VLLM_TEXT), [])._report(parse_metrics(VLLM_TEXT))
    assert report["spec_decode_acceptance_rate"] is None
    assert report["spec_decode_mean_acceptance_length"] is None
