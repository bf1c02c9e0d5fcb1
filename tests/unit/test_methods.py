"""The methods (ddmrl.methods: one module each, its section model ``Params`` and its ``METHOD`` record) and how
params.yaml resolves a method section (ddmrl.config.load, ddmrl.config.method_config).

Precedence: the method model's defaults < explicit ``grpo:`` keys, except those the method fixes (a ``Literal`` of one
value in its model, e.g. SPG's beta 0) < ``methods.<name>``, and a section contradicting a fixed value is refused.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddmrl.config import ConfigError, GRPOConfig, load, method_config
from ddmrl.masking import VIEWS
from ddmrl.methods import METHODS
from ddmrl.objectives import ADVANTAGES, OBJECTIVES, STEP_ADVANTAGES, VIEW_ADVANTAGES, WEIGHTINGS

ALL = [
    "diffu_grpo",
    "unigrpo",
    "maskgrpo",
    "rebrl",
    "tracerl",
    "gdpo",
    "spg",
    "wd1",
    "mdpo",
    "cj_grpo",
    "coupled_grpo",
    "justgrpo",
    "vrpo",
    "espo",
    "ebpo",
    "bgpo",
    "treerpo",
    "dipo",
    "gdsd",
    "gdsd_tlc",
    "tracerl_value",
    "rldf",
]  # grpo's sampler (JustGRPO: its own, blocks of one token, unless grpo: sets one)
AUX = ["cogrpo", "unmask_policy"]  # with an auxiliary policy (Co-GRPO: images, maskgit; unmasking policy: llada)
AUGMENTED = ["igpo"]  # with a rollout augmenter (IGPO: the plain llada sampler, a task with reasoning traces)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def refused(tmp_path: Path, text: str) -> str:
    """The one-line ConfigError message of loading ``text``."""
    with pytest.raises(ConfigError) as info:
        load(write(tmp_path, text))
    msg = str(info.value)
    assert "\n" not in msg, f"not one line: {msg!r}"
    return msg


def every_method(extra: str = "") -> str:
    return f"grpo:\n  methods: [{', '.join(ALL)}]\n{extra}"


def test_every_method_record_is_well_formed():
    """Each record names a known view sampler, weighting and objective, and the record's key is its name."""
    assert sorted(METHODS) == sorted(ALL + AUX + AUGMENTED)
    for name, m in METHODS.items():
        assert m.name == name
        assert m.remasking in VIEWS and m.weighting in WEIGHTINGS and m.objective in OBJECTIVES, name
        assert m.step_advantage in ("", *STEP_ADVANTAGES) and m.view_advantage in ("", *VIEW_ADVANTAGES), name
        assert m.paper
    assert set(OBJECTIVES) <= {m.objective for m in METHODS.values()}  # every built-in objective is some method's


def test_bgpo_is_one_package_and_its_line_in_methods():
    """BGPO brings its own weighting and objective (``ddmrl.methods.bgpo.objective``), named by where they live: no
    line of its in OBJECTIVES or WEIGHTINGS, and its stages depend on its own modules."""
    m = METHODS["bgpo"]
    assert METHODS.module("bgpo") == "ddmrl.methods.bgpo"
    for registry, name in ((WEIGHTINGS, m.weighting), (OBJECTIVES, m.objective)):
        assert registry.module(name) == "ddmrl.methods.bgpo.objective" and name not in registry.specs


def test_every_method_module_declares_its_params():
    """Each method's module holds its section model, a GRPOConfig whose method is the method's name; every view
    sampler the registry names is a function of ddmrl.masking.views or of its method's own module of ddmrl.masking
    (RLDF's)."""
    own = {"rldf": "ddmrl.masking.rldf"}
    assert all(callable(VIEWS[v]) and VIEWS.module(v) == own.get(v, "ddmrl.masking.views") for v in VIEWS)
    for registry in (WEIGHTINGS, ADVANTAGES, STEP_ADVANTAGES, VIEW_ADVANTAGES):
        assert all(callable(registry[name]) for name in registry)
    for name, m in METHODS.items():
        assert issubclass(m.params, GRPOConfig) and m.params().method == name
        assert m.params.__module__ == METHODS.module(name) == f"ddmrl.methods.{name}"
        assert m.display and m.display != name or name == "wd1", name


def test_what_each_method_fixes():
    assert {m: METHODS[m].fixed() for m in ALL + AUX if METHODS[m].fixed()} == {
        "gdpo": {"scale_rewards": "none"},
        "spg": {"beta": 0.0},
        "wd1": {"scale_rewards": "none", "beta": 0.0},
        "mdpo": {"remasking": "mdpo_topk"},
        "cj_grpo": {"remasking": "cj_grpo"},
        "coupled_grpo": {"remasking": "coupled"},
        "justgrpo": {"remasking": "tracerl", "shrink": 1, "beta": 0.0, "loss_type": "token_mean"},
        "vrpo": {"remasking": "stratified", "kl_target": "ref"},
        "bgpo": {"beta": 0.0},
        "treerpo": {"remasking": "tree"},
        "unmask_policy": {"scale_rewards": "none", "beta": 0.0},
        "espo": {"remasking": "espo"},
        "ebpo": {"remasking": "ebpo_blocks"},
        "dipo": {"remasking": "dipo"},
        "gdsd": {"remasking": "espo"},
        "gdsd_tlc": {"remasking": "espo"},
        "rldf": {"remasking": "rldf"},
    }


def test_every_method_loads_with_its_defaults_and_fixed_values(tmp_path):
    cfg = load(write(tmp_path, every_method()))
    assert cfg.grpo.methods == tuple(ALL) and set(cfg.methods) == set(ALL)
    assert len(cfg.run_names()) == len(ALL) * len(cfg.tasks) * len(cfg.grpo.seeds)
    for name in ALL:  # no grpo: keys but the run list: every run is its method model's defaults
        assert cfg.methods[name] == METHODS[name].params(), name
    assert cfg.methods["gdpo"].views_per_step == 3 and cfg.methods["gdpo"].scale_rewards == "none"
    assert cfg.methods["spg"].beta == 0.0 and cfg.methods["spg"].eubo_mix == 0.5
    assert cfg.methods["wd1"].beta == 0.0 and cfg.methods["wd1"].scale_rewards == "none"
    assert cfg.methods["tracerl"].kl_target == "old" and cfg.methods["tracerl"].loss_type == "seq_mean"
    assert cfg.methods["unigrpo"].beta == 0.01 and cfg.methods["unigrpo"].kl_target == "ref"
    assert cfg.methods["mdpo"].loss_type == "seq_mean" and cfg.methods["mdpo"].sample_train_steps == 8
    assert cfg.methods["cj_grpo"].loss_type == "token_mean" and cfg.methods["cj_grpo"].kl_target == "ref"


def test_fixed_values_win_over_explicit_grpo_keys(tmp_path):
    """grpo.beta = 0.04 and grpo.scale_rewards = group apply to the methods that leave them free, but SPG and wd1 keep
    beta 0 and GDPO and wd1 keep scale_rewards none (their definitions)."""
    cfg = load(write(tmp_path, every_method("  beta: 0.04\n  scale_rewards: group\n")))
    assert cfg.methods["unigrpo"].beta == 0.04 and cfg.methods["gdpo"].beta == 0.04
    assert cfg.methods["spg"].beta == 0.0 and cfg.methods["wd1"].beta == 0.0
    assert cfg.methods["unigrpo"].scale_rewards == "group" and cfg.methods["spg"].scale_rewards == "group"
    assert cfg.methods["gdpo"].scale_rewards == "none" and cfg.methods["wd1"].scale_rewards == "none"


def test_explicit_grpo_keys_win_over_method_defaults_and_sections_win_over_both(tmp_path):
    """grpo.views_per_step = 5 overrides GDPO's and SPG's defaults (3 and 2); methods.gdpo.views_per_step = 4 overrides
    grpo; a method section may restate a fixed value (methods.spg.beta: 0.0)."""
    text = every_method("  views_per_step: 5\nmethods:\n  gdpo: {views_per_step: 4}\n  spg: {beta: 0.0}\n")
    cfg = load(write(tmp_path, text))
    assert cfg.methods["spg"].views_per_step == 5 and cfg.methods["gdpo"].views_per_step == 4
    assert cfg.methods["spg"].beta == 0.0


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("methods: {spg: {beta: 0.1}}\n", "methods.spg.beta", "requires 0.0"),
        ("methods: {wd1: {beta: 0.01}}\n", "methods.wd1.beta", "requires 0.0"),
        ("methods: {gdpo: {scale_rewards: group}}\n", "methods.gdpo.scale_rewards", "requires 'none'"),
        ("methods: {spg_b2: {method: spg, beta: 0.1}}\n", "methods.spg_b2.beta", "spg requires"),
    ],
)
def test_a_method_section_contradicting_a_fixed_value_is_refused(tmp_path, text, key, words):
    msg = refused(tmp_path, every_method(text))
    assert key in msg and words in msg, msg


def test_rebrl_on_full_completion_views_is_refused(tmp_path):
    msg = refused(tmp_path, every_method("methods: {rebrl: {remasking: full_completion}}\n"))
    assert "methods.rebrl.remasking" in msg and "full_completion" in msg


def test_maskgrpo_with_trajectory_coupling_is_refused(tmp_path):
    msg = refused(tmp_path, every_method("methods: {maskgrpo: {coupling: trajectory}}\n"))
    assert "methods.maskgrpo.coupling" in msg and "trajectory" in msg


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("methods: {mdpo: {sampler: {kv_cache: prefix}}}\n", "methods.mdpo.sampler.kv_cache"),
        ("methods: {cj_grpo: {sampler: {parallel: threshold}}}\n", "methods.cj_grpo.sampler.parallel"),
        ("methods: {cj_grpo: {sampler: {name: maskgit}}}\n", "methods.cj_grpo.sampler.name"),
        ("methods: {unigrpo: {remasking: mdpo_topk}}\n", "methods.unigrpo.remasking"),
        ("methods: {mdpo: {remasking: unigrpo}}\n", "methods.mdpo.remasking"),
        ("methods: {mdpo: {sample_train_steps: 0}}\n", "methods.mdpo.sample_train_steps"),
    ],
)
def test_views_of_stored_states_need_the_plain_llada_sampler(tmp_path, text, key):
    """MDPO and CJ-GRPO train on the sampler's recorded states: no KV cache, no parallel decoding, the llada sampler;
    MDPO's top-K steps need its per-step advantages."""
    msg = refused(tmp_path, every_method(text))
    assert key in msg, msg


def test_trajectory_coupling_is_accepted_where_it_applies(tmp_path):
    cfg = load(write(tmp_path, every_method("methods: {rebrl: {coupling: trajectory}}\n")))
    assert cfg.methods["rebrl"].coupling == "trajectory"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("grpo: {num_prompts: 6, gradient_accumulation_steps: 4}\n", "grpo.gradient_accumulation_steps"),
        ("methods: {unigrpo: {gradient_accumulation_steps: 3}}\n", "methods.unigrpo.gradient_accumulation_steps"),
    ],
)
def test_gradient_accumulation_must_divide_num_prompts(tmp_path, text, key):
    msg = refused(tmp_path, text)
    assert key in msg and "must divide num_prompts" in msg, msg


def test_gradient_accumulation_dividing_num_prompts_is_accepted(tmp_path):
    cfg = load(write(tmp_path, "grpo: {num_prompts: 6, gradient_accumulation_steps: 3}\n"))
    assert cfg.methods["unigrpo"].gradient_accumulation_steps == 3


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("methods: {foo: {learning_rate: 0.1}}\n", "methods.foo"),
        ("methods: {bar: {method: ppo}}\n", "methods.bar.method"),
    ],
)
def test_an_unlisted_section_with_an_unknown_method_is_refused(tmp_path, text, key):
    msg = refused(tmp_path, text)
    assert key in msg and "unknown method" in msg, msg


def test_an_unlisted_section_of_a_known_method_is_resolved_but_not_run(tmp_path):
    cfg = load(write(tmp_path, "grpo: {methods: [spg]}\nmethods: {spg_b2: {method: spg, eubo_beta: 2.0}}\n"))
    assert cfg.methods["spg_b2"].method == "spg" and cfg.methods["spg_b2"].eubo_beta == 2.0
    assert cfg.methods["spg_b2"].beta == 0.0
    assert not any(r.startswith("spg_b2_") for r in cfg.run_names())


def test_an_unknown_remasking_is_refused_at_load(tmp_path):
    msg = refused(tmp_path, "methods: {unigrpo: {remasking: bogus}}\n")
    assert "methods.unigrpo.remasking" in msg


def test_method_config_resolves_as_load_does(tmp_path):
    """The helper library code and tests use to build a run's config follows load's precedence."""
    text = every_method("  beta: 0.04\n  views_per_step: 5\nmethods:\n  gdpo: {views_per_step: 4}\n")
    cfg = load(write(tmp_path, text))
    shared = {"methods": ALL, "beta": 0.04, "views_per_step": 5}
    for name in ALL:
        section = {"views_per_step": 4} if name == "gdpo" else {}
        assert method_config(name, shared, **section) == cfg.methods[name], name
    assert method_config("spg", {"beta": 0.04}).beta == 0.0
    assert isinstance(method_config("rebrl"), METHODS["rebrl"].params)
    with pytest.raises(ConfigError, match="beta = 0.1: spg requires 0.0 by definition"):
        method_config("spg", beta=0.1)
    with pytest.raises(ConfigError, match="methods.ppo = 'ppo': unknown method"):
        method_config("ppo")


def test_a_method_model_refuses_a_bad_value_in_one_line_when_built_directly():
    with pytest.raises(ConfigError) as info:
        METHODS["maskgrpo"].params(gamma=0.3)
    assert str(info.value).startswith("gamma = 0.3: AR-like fading needs gamma >= 0.5")


@pytest.mark.parametrize(
    ("method", "key", "accepted"),
    [
        ("mdpo", "loss_after_eos", True),
        ("unigrpo", "loss_after_eos", False),
        ("maskgrpo", "maskgrpo_legacy", True),
        ("rebrl", "maskgrpo_legacy", False),
        ("mdpo", "mdpo_tempered_confidence", True),
        ("cj_grpo", "mdpo_tempered_confidence", False),
        ("espo", "loss_after_eos", True),
    ],
)
def test_a_reproduction_switch_is_accepted_only_by_the_methods_that_declare_it(method, key, accepted):
    """A reproduction switch is a key of the ``Params`` of the methods whose releases have the quirk (listed in
    ``Method.switches`` for the docs); the other methods' sections refuse it as an unknown key, in one line."""
    params = METHODS[method].params
    assert (key in METHODS[method].switches) == accepted == (key in params.__pydantic_fields__)
    if accepted:
        assert getattr(method_config(method, **{key: True}), key) is True
    else:
        with pytest.raises(ConfigError, match=f"^{key}: unknown key") as e:
            method_config(method, **{key: True})
        assert "\n" not in str(e.value)


def test_every_listed_switch_is_a_key_of_its_methods_params():
    for name in METHODS:
        method = METHODS[name]
        assert set(method.switches) <= set(method.params.__pydantic_fields__), name
