#include "train/options.hpp"

#include "antdt/emulation.hpp"
#include "antdt/error.hpp"
#include "antdt/log.hpp"
#include "antdt/model.hpp"
#include "cli/cli_common.hpp"
#include "train/stop.hpp"

namespace antdt::train {

void add_options(CLI::App& app, TrainOptions& o) {
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a later --x wins
  app.set_config("--config", "", "Read options from a TOML/INI file (keys are the long option names)");
  const char* data = "Data";
  app.add_option("--data", o.data,
                 "Training set: HDF5 file with features (N x D float32) and labels (N int32); "
                 "without it, a synthetic set is generated in memory")
      ->group(data);
  app.add_option("--eval-data", o.eval_data, "Held-out evaluation set (HDF5, same layout)")->group(data);
  app.add_option("--features-name", o.features_name, "Name of the features data set")
      ->group(data)
      ->capture_default_str();
  app.add_option("--labels-name", o.labels_name, "Name of the labels data set")->group(data)->capture_default_str();
  app.add_option("--synthetic-samples", o.synthetic_samples, "Samples of the in-memory synthetic set (no --data)")
      ->group(data)
      ->check(cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--synthetic-dim", o.synthetic_dim, "Features per sample of the synthetic set (no --data)")
      ->group(data)
      ->check(cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--synthetic-classes", o.synthetic_classes, "Classes of the synthetic set (no --data)")
      ->group(data)
      ->check(cli::in_range<std::int32_t>(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--synthetic-seed", o.synthetic_seed, "Seed of the in-memory synthetic set")
      ->group(data)
      ->capture_default_str();
  app.add_flag("--skip-non-finite", o.skip_non_finite,
               "Drop the samples whose features hold a NaN or an infinity, and train on the rest (the summary "
               "counts them); without it such a sample is an error naming the file and the sample")
      ->group(data);
  app.add_option("--read-mode", o.read_mode,
                 "HDF5 reads: independent (each rank opens the file itself) or collective "
                 "(MPI-IO driver on all ranks; docs/data.md has the measurement)")
      ->group(data)
      ->check(CLI::IsMember({"independent", "collective"}))
      ->capture_default_str();
  app.add_option("--read-ahead", o.read_ahead,
                 "Read the next step's samples on a background thread while this step computes: auto (on with a "
                 "CUDA device, whose host cores are free meanwhile; off on the host backend, whose cores run BLAS), "
                 "on or off. Not with --read-mode collective, whose reads are MPI calls")
      ->group(data)
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  app.add_option("--eval-every", o.eval_every, "Evaluate on --eval-data every K steps (0: only at the end)")
      ->group(data)
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();

  const char* model = "Model";
  app.add_option("--hidden", o.hidden,
                 std::string("Hidden layer widths, e.g. 256,256 (none: no hidden layer); the input width and the "
                             "class count come from the data (default: ") +
                     kDefaultHidden + ")")
      ->group(model);
  app.add_option("--layers", o.layers,
                 "All MLP widths, input,hidden...,classes, instead of --hidden (the input must match the data, and "
                 "the classes cover its labels)")
      ->group(model);
  app.add_option("--optimizer", o.optimizer, "sgd (with momentum) or adam")
      ->group(model)
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Learning rate")->group(model)->check(cli::positive<float>())->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->group(model)
      ->check(cli::in_range<float>(0.0f, 1.0f))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 weight decay")
      ->group(model)
      ->check(cli::at_least<float>(0.0f))
      ->capture_default_str();
  app.add_option("--model-seed", o.model_seed, "Parameter initialisation seed")->group(model)->capture_default_str();
  app.add_option("--device", o.device, "auto (GPU when present), host or cuda")
      ->group(model)
      ->check(CLI::IsMember({"auto", "host", "cuda"}))
      ->capture_default_str();
  app.add_flag("--pin-memory,!--no-pin-memory", o.pin_memory,
               "On a GPU, read batches into page-locked host memory so their copy to the device goes by DMA; "
               "falls back to pageable memory (with a warning) if the system refuses to pin (default: on)")
      ->group(model)
      ->capture_default_str();
  app.add_option("--reduce-overlap", o.reduce_overlap,
                 "Start each layer's gradient all-reduce as soon as backward finishes it, while the earlier layers "
                 "still compute: auto (on with a CUDA device reduced through MPI, whose host thread is idle during "
                 "backward; off on the host backend, where it measured no gain, and with emulated speeds, whose "
                 "stretch would hide the reduction), on or off. NCCL does not overlap in this version (on: a "
                 "warning, then the reduction after backward)")
      ->group(model)
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();

  const char* sched = "Schedule";
  app.add_option("--global-batch", o.global_batch, "Samples per step across all ranks (B)")
      ->group(sched)
      ->check(cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--steps", o.steps, "Stop after this many steps (0: no step limit)")
      ->group(sched)
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();
  app.add_option("--epochs", o.epochs,
                 "Stop after this many epochs (0: no epoch limit); one of --steps/--epochs is needed")
      ->group(sched)
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();
  app.add_option("--micro-batch-cap", o.micro_batch_cap,
                 "Most samples per micro-step on this rank (0: from free memory)")
      ->group(sched)
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();
  app.add_option("--shard-size", o.shard_size, "DDS shard length in samples (0: about 10 micro-batches)")
      ->group(sched)
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();
  app.add_option("--data-seed", o.data_seed, "Seed of the per-epoch shard order")->group(sched)->capture_default_str();
  app.add_flag("--shuffle-within-shard", o.shuffle_within_shard, "Also shuffle sample order inside each shard")
      ->group(sched);
  app.add_option("--prefetch-steps", o.prefetch_steps, "Grant shards this many steps ahead")
      ->group(sched)
      ->check(cli::in_range<int>(1, 64))
      ->capture_default_str();

  const char* pol = "Policy";
  app.add_option("--policy", o.policy,
                 "static (equal batches), dd (dedicated: speed-proportional batches), nd (non-dedicated: every "
                 "rank claims micro-chunks of the step until B samples are done, whoever did them; docs/nd.md)")
      ->group(pol)
      ->check(CLI::IsMember({"static", "dd", "nd"}))
      ->capture_default_str();
  app.add_option("--backup-workers", o.backup_workers,
                 "nd: ranks a step may do without; each rank may claim up to P/(P-b) times its share, so any "
                 "P-b ranks can do the step's B samples (0 to ranks-1; default 1, or 0 on a single rank)")
      ->group(pol)
      ->check(CLI::Range(-1, 1 << 20));
  app.add_option("--nd-chunks", o.nd_chunks,
                 "nd: a rank's micro-chunk is about its share / this (at most --micro-batch-cap); smaller chunks "
                 "end a step closer to B samples done, each costs one claim on rank 0")
      ->group(pol)
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app.add_option("--nd-first-chunk", o.nd_first_chunk,
                 "nd: a step's first chunk is at least this part of a rank's share, the rest claimed in --nd-chunks "
                 "chunks as usual: one large GEMM for the bulk, only the tail balanced within the step (0: off; "
                 "0 to 0.99)")
      ->group(pol)
      ->check(CLI::Range(0.0, 0.99))
      ->capture_default_str();
  app.add_option("--nd-pool", o.nd_pool,
                 "nd: how ranks learn a step's B samples are done: counter (every chunk claimed from one counter on "
                 "rank 0: exactly B, whoever did them), deadline (rank 0 predicts the compute time of B at the ranks' "
                 "usual speeds; each stops there), auto (counter on one node, deadline across nodes; docs/nd.md)")
      ->group(pol)
      ->check(CLI::IsMember({"auto", "counter", "deadline"}))
      ->capture_default_str();
  app.add_option("--max-restarts", o.max_restarts,
                 "nd: kill-restarts the Controller may decide over the whole run (a restart ends the job with exit "
                 "code 75 and the nodes to leave out in the checkpoint directory; 0: never)")
      ->group(pol)
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  app.add_option("--restart-cooldown", o.restart_cooldown,
                 "nd: steps after a restart before the next one may be decided (0: the Monitor window)")
      ->group(pol)
      ->check(cli::at_least<int>(0))
      ->capture_default_str();
  app.add_flag("--probe,!--no-probe", o.probe,
               "Time a few micro-steps per rank at start so the planner begins from the best split (default: on)")
      ->group(pol)
      ->capture_default_str();
  app.add_option("--fixed-split", o.fixed_split,
                 "Policy static: these per-rank batches b_0,b_1,... (summing to --global-batch) instead of equal "
                 "ones, e.g. the best fixed split found offline (perf/controller/real-noise.sh)")
      ->group(pol);
  app.add_option("--min-gain", o.min_gain, "Re-plan only when the predicted step time improves by this fraction")
      ->group(pol)
      ->check(cli::in_range<double>(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--min-interval", o.min_interval, "Steps between plan changes, at least")
      ->group(pol)
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();
  app.add_option("--window", o.window, "Monitor window in steps")
      ->group(pol)
      ->check(cli::in_range<int>(2, 10000))
      ->capture_default_str();
  app.add_option("--persistence", o.persistence,
                 "Windows a rank must stay slow before it counts as a persistent straggler")
      ->group(pol)
      ->check(cli::in_range<int>(1, 10000))
      ->capture_default_str();

  const char* emu = "Straggler emulation (reports say EMULATED)";
  app.add_option("--emulate-speed", o.emulate_speed,
                 "Per-rank relative speeds, e.g. 1,1,1,0.33: compute is stretched to compute/speed")
      ->group(emu);
  app.add_option("--emulate-transient", o.emulate_transient,
                 "P,FACTOR,STEPS: each step a rank starts a FACTORx slowdown for STEPS steps with probability P")
      ->group(emu);
  app.add_option("--emulate-schedule", o.emulate_schedule,
                 "RANK:STEP:SPEED or @NODE:STEP:SPEED, ...: from STEP on, that rank (or every rank on that node, "
                 "by Slurm node name or host name) runs at SPEED; replays the same after a resume")
      ->group(emu);
  app.add_option("--virtual-device", o.virtual_device,
                 "Seconds per sample at speed 1: compute of b samples takes b*c/speed (virtual-device benchmark mode)")
      ->group(emu)
      ->check(cli::at_least<double>(0.0))
      ->capture_default_str();
  app.add_option("--emulate-seed", o.emulate_seed, "Seed of the transient slowdowns")
      ->group(emu)
      ->capture_default_str();

  const char* ck = "Checkpoints";
  app.add_option("--checkpoint-dir", o.checkpoint_dir, "Directory for HDF5 checkpoints (%j = Slurm job id)")->group(ck);
  app.add_option("--checkpoint-every", o.checkpoint_every, "Checkpoint every K steps (0: by --checkpoint-minutes only)")
      ->group(ck)
      ->check(cli::at_least<std::int64_t>(0))
      ->capture_default_str();
  app.add_option("--checkpoint-minutes", o.checkpoint_minutes,
                 "Also checkpoint when this many minutes have passed since the last checkpoint (rank 0's clock; "
                 "0: off). The run always checkpoints at its end and when it stops on a signal")
      ->group(ck)
      ->check(cli::in_range<double>(0.0, 1e6))
      ->capture_default_str();
  app.add_option("--checkpoint-keep", o.checkpoint_keep, "Keep the newest K checkpoints")
      ->group(ck)
      ->check(cli::in_range<int>(1, 1000))
      ->capture_default_str();
  app.add_flag("--resume", o.resume,
               "Resume from the newest complete checkpoint in --checkpoint-dir (any world size); refused when the "
               "directory belongs to another run (other data, model shape or seeds)")
      ->group(ck);
  app.add_flag("--checkpoint-overwrite", o.checkpoint_overwrite,
               "Start a fresh run in a --checkpoint-dir that holds another run's checkpoints, deleting them; "
               "without it that is refused")
      ->group(ck);

  const char* out = "Outputs";
  app.add_option("--summary-json", o.summary_json, "Write the end-of-run summary as JSON here (%j = job id)")
      ->group(out);
  app.add_option("--timeline", o.timeline, "Write a Chrome-trace timeline (Perfetto) here")->group(out);
  app.add_option("--metrics", o.metrics, "Write per-step, per-rank metrics here (.csv, otherwise JSONL)")->group(out);
  app.add_option("--progress", o.progress, "Progress line on rank 0: auto (only on a terminal), always, never")
      ->group(out)
      ->check(CLI::IsMember({"auto", "always", "never"}))
      ->capture_default_str();
  app.add_option("--progress-every", o.progress_every, "Steps between progress lines")
      ->group(out)
      ->check(cli::positive<std::int64_t>())
      ->capture_default_str();
  app.add_option("--log-level", o.log_level, "error, warn, info, debug or trace (default: ANTDT_LOG_LEVEL or info)")
      ->group(out);
  app.add_flag("--quiet", o.quiet, "Do not print the end-of-run report")->group(out);

  const char* fail = "Failures";
  app.add_option("--step-timeout", o.step_timeout,
                 "Seconds rank 0 waits at a step's reduction for the other ranks; then it names the ones that did not "
                 "arrive and every rank exits with code 5 (0: wait forever). Waiting ranks sleep, not spin")
      ->group(fail)
      ->check(cli::in_range<double>(0.0, 1e9))
      ->capture_default_str();
  app.add_option("--stop-signals", o.stop_signals,
                 "Signals that stop the run after the step under way, with a checkpoint and exit code 76 (a second "
                 "one ends it at once): a list of TERM, INT, USR1, USR2, HUP, QUIT, XCPU, ALRM, URG, or none")
      ->group(fail)
      ->capture_default_str();

  const char* test = "Testing";
  app.add_option("--sample-log", o.sample_log,
                 "Each rank writes the sample indices it trains on, one line 'STEP i i ...' per step, to PATH.RANK "
                 "(an audit of every sample once per epoch, independent of antdt's own counters)")
      ->group(test);
  app.add_option("--fail-in-checkpoint", o.fail_in_checkpoint,
                 "Kill rank 0 with SIGKILL half-way through writing the checkpoint of this step (failure tests)")
      ->group(test)
      ->capture_default_str();
  app.add_option("--fail-at-step", o.fail_at_step,
                 "Kill --fail-rank with SIGKILL when it begins this step (failure tests)")
      ->group(test)
      ->capture_default_str();
  app.add_option("--fail-rank", o.fail_rank, "Rank killed by --fail-at-step")
      ->group(test)
      ->check(cli::at_least<int>(0))
      ->capture_default_str();
  antdt::cli::add_env_names(app);
  antdt::cli::strict_config(app);
}

namespace {

// --hidden: positive widths separated by commas, or "none".
std::vector<std::int64_t> parse_hidden(const std::string& text) {
  if (text == "none") return {};
  try {
    const auto widths = antdt::parse_layers("1," + text + ",1");
    return {widths.begin() + 1, widths.end() - 1};
  } catch (const antdt::UsageError&) {
    throw antdt::UsageError("--hidden '" + text +
                            "': give positive widths separated by commas, e.g. 256,256 (or none for no hidden layer)");
  }
}

}  // namespace

void validate(const TrainOptions& o, int world) {
  using antdt::UsageError;
  if (o.steps == 0 && o.epochs == 0) throw UsageError("give --steps or --epochs (or both)");
  if (o.policy == "nd" && o.backup_workers >= world) {
    throw UsageError("--backup-workers " + std::to_string(o.backup_workers) + " leaves no rank to do a step of this " +
                     std::to_string(world) + "-rank job (give 0 to " + std::to_string(world - 1) + ")");
  }
  if (o.resume && o.checkpoint_dir.empty()) throw UsageError("--resume needs --checkpoint-dir");
  if (o.checkpoint_overwrite && o.checkpoint_dir.empty())
    throw UsageError("--checkpoint-overwrite needs --checkpoint-dir");
  if (o.checkpoint_overwrite && o.resume) {
    throw UsageError("--resume continues the run in --checkpoint-dir and --checkpoint-overwrite discards it; give one");
  }
  if (!o.layers.empty() && !o.hidden.empty()) {
    throw UsageError(
        "give --layers (every width) or --hidden (the hidden widths; the rest comes from the data), not both");
  }
  if (!o.hidden.empty()) (void)parse_hidden(o.hidden);
  if (o.data.empty() && o.skip_non_finite)
    throw UsageError("--skip-non-finite needs --data (synthetic data is finite)");
  if (o.checkpoint_every > 0 && o.checkpoint_dir.empty()) throw UsageError("--checkpoint-every needs --checkpoint-dir");
  if (o.fail_in_checkpoint >= 0 && o.checkpoint_dir.empty())
    throw UsageError("--fail-in-checkpoint needs --checkpoint-dir");
  (void)parse_stop_signals(o.stop_signals);
  if (o.eval_every > 0 && o.eval_data.empty()) throw UsageError("--eval-every needs --eval-data");
  if (o.read_ahead == "on" && o.read_mode == "collective") {
    throw UsageError(
        "--read-ahead on needs --read-mode independent: collective reads are MPI calls, which antdt "
        "makes from the main thread only");
  }
  if (o.fail_at_step >= 0 && o.fail_rank >= world) {
    throw UsageError("--fail-rank " + std::to_string(o.fail_rank) + " is not a rank of this " + std::to_string(world) +
                     "-rank job");
  }
  if (!o.layers.empty()) (void)antdt::parse_layers(o.layers);
  if (!o.emulate_speed.empty()) (void)antdt::parse_speeds(o.emulate_speed);
  if (!o.emulate_schedule.empty()) (void)antdt::parse_schedule(o.emulate_schedule);
  if (!o.emulate_transient.empty()) {
    antdt::EmulationOptions e;
    antdt::parse_transient(o.emulate_transient, e);
  }
  if (!o.log_level.empty()) (void)antdt::log::parse_level(o.log_level);
}

std::vector<std::int64_t> model_layers(const TrainOptions& o, std::int64_t dim, std::int32_t classes,
                                       const std::string& data_name) {
  using antdt::UsageError;
  if (o.layers.empty()) {
    const auto widths = parse_hidden(o.hidden.empty() ? kDefaultHidden : o.hidden);
    std::vector<std::int64_t> layers{dim};
    layers.insert(layers.end(), widths.begin(), widths.end());
    layers.push_back(classes);
    return layers;
  }
  const auto layers = antdt::parse_layers(o.layers);
  if (layers.front() != dim) {
    throw UsageError("--layers " + o.layers + " starts with " + std::to_string(layers.front()) + " inputs but " +
                     data_name + " has " + std::to_string(dim) +
                     " features per sample; drop --layers (the widths then come from the data) or start it with " +
                     std::to_string(dim));
  }
  if (classes > layers.back()) {
    throw UsageError("--layers " + o.layers + " ends with " + std::to_string(layers.back()) + " classes but " +
                     data_name + " has " + std::to_string(classes) + " (labels up to " + std::to_string(classes - 1) +
                     "); drop --layers or end it with " + std::to_string(classes));
  }
  return layers;
}

}  // namespace antdt::train
