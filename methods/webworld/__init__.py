"""WebWorld: a large-scale LLM world model (browser simulator) for web-agent training.

Xiao et al., ICML 2026 (arXiv 2602.14721). A causal LM is trained to predict the next page state
``s_{t+1}`` given the instruction and the history ``(s_0, a_0, ..., s_t, a_t)`` (Eq. 1-2) on ~1M
open-web trajectories. The package holds the data layer (action grammar, A11y parser and
multi-format converters of App. G, trajectory filters of §3.3, chat format of App. N.1), the
two-stage TRL SFT recipe (§3.5, Table 9), the gymnasium-like simulator with its sliding history
window (official ``demo/world_model_context.py``), the WebWorld-Bench judge metrics (§4), best-of-k
lookahead (§5.2), agent-trajectory synthesis (§5.1) and generated A11y websites for the CPU toy.
"""

from typing import TYPE_CHECKING

from common.lazy import lazy_exports

if TYPE_CHECKING:  # the public API; each name is imported on first use (common/lazy.py)
    from methods.webworld.a11y import (
        A11yNode,
        convert_sample,
        from_xml,
        parse_a11y,
        to_a11y,
        to_html,
        to_markdown,
        to_playwright,
        to_xml,
    )
    from methods.webworld.actions import (
        ACTION_NAMES,
        BID_ACTIONS,
        Action,
        ActionParseError,
        extract_action,
        parse_action,
        render_action,
    )
    from methods.webworld.bench import (
        DIMENSIONS,
        JudgeResult,
        aggregate,
        evaluate,
        factuality,
        parse_judge_json,
        web_turing,
    )
    from methods.webworld.bench_data import (
        BenchSample,
        load_bench_file,
        load_bench_jsonl,
        load_official_eval,
    )
    from methods.webworld.data import Trajectory, drop_noop_transitions, filter_trajectory, to_chat
    from methods.webworld.prompts import (
        CONTINUE_TURN,
        FIRST_TURN,
        SYSTEM_PROMPT,
        build_messages,
        strip_reasoning,
    )
    from methods.webworld.search import llm_value_fn, lookahead_search, parse_value_reply
    from methods.webworld.simulator import WebWorldSimulator, detect_format
    from methods.webworld.synthesis import agent_sft_dataset, instantiate_goal, synthesize
    from methods.webworld.toy_sites import ToyBrowser, ToySite, crawl, make_sites, page_title
    from methods.webworld.train import (
        TRAIN_CHAT_TEMPLATE,
        chat_dataset,
        last_turn_dataset,
        site_tokenizer,
        stage1_config,
        stage2_config,
        train_world_model,
    )

__all__ = [
    "ACTION_NAMES",
    "BID_ACTIONS",
    "CONTINUE_TURN",
    "DIMENSIONS",
    "FIRST_TURN",
    "SYSTEM_PROMPT",
    "TRAIN_CHAT_TEMPLATE",
    "A11yNode",
    "Action",
    "ActionParseError",
    "BenchSample",
    "JudgeResult",
    "ToyBrowser",
    "ToySite",
    "Trajectory",
    "WebWorldSimulator",
    "agent_sft_dataset",
    "aggregate",
    "build_messages",
    "chat_dataset",
    "convert_sample",
    "crawl",
    "detect_format",
    "drop_noop_transitions",
    "evaluate",
    "extract_action",
    "factuality",
    "filter_trajectory",
    "from_xml",
    "instantiate_goal",
    "last_turn_dataset",
    "llm_value_fn",
    "load_bench_file",
    "load_bench_jsonl",
    "load_official_eval",
    "lookahead_search",
    "make_sites",
    "page_title",
    "parse_a11y",
    "parse_action",
    "parse_judge_json",
    "parse_value_reply",
    "render_action",
    "site_tokenizer",
    "stage1_config",
    "stage2_config",
    "strip_reasoning",
    "synthesize",
    "to_a11y",
    "to_chat",
    "to_html",
    "to_markdown",
    "to_playwright",
    "to_xml",
    "train_world_model",
    "web_turing",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
