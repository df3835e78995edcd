// The configuration of a run, shared by every service of it: the keys of
// scDINO's scDINO_full_pipeline.yaml (sections meta, train_scDINO with
// hyperparameters, downstream_analyses) plus our own section `scdino`. Plain
// structs with scDINO's defaults, filled from YAML at the edge and validated
// in one place (LoadRunConfig) against the schema of config/config_schema.h,
// which also writes docs/config.md; every error names the file, the line,
// the key path, the value and what was expected.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "common/status.h"
#include "data/dataset.h"
#include "data/multicrop.h"
#include "data/synthetic.h"
#include "model/dino.h"
#include "model/schedules.h"

namespace scdino::run {

/// Section `meta`.
struct MetaConfig {
  std::string name_of_run = "scdino_run";  ///< run directory name under output_dir
  std::string output_dir = "runs";
  std::string dataset_dir;                 ///< image root (file data sources)
  int64_t folder_depth_for_labels = 0;     ///< 0: the folder holding the images names the class
  double train_datasetsplit_fraction = 0.8;
  int64_t seed = 40;
  bool images_are_RGB = false;
  std::map<int64_t, std::string> channel_dict;  ///< channel index -> name
  /// scDINO's selected_channel_combination_per_run: "01234" style strings,
  /// or lists of indices or channel names.
  std::vector<std::vector<int64_t>> selected_channel_combination_per_run{{0, 1, 2, 3, 4}};
  int64_t center_crop = 0;  ///< 0: none
};

/// Section `train_scDINO.hyperparameters` (scDINO keys first, ours after).
struct HyperConfig {
  std::string arch = "vit_small";  ///< vit_tiny | vit_small | vit_base
  int64_t patch_size = 16;
  bool norm_last_layer = true;
  double momentum_teacher = 0.996;
  bool use_bn_in_head = false;
  double warmup_teacher_temp = 0.04;
  double teacher_temp = 0.04;  ///< also read as scDINO's spelling `techer_temp`
  int64_t warmup_teacher_temp_epochs = 0;
  bool use_fp16 = true;        ///< mixed precision on GPUs; CPU runs stay fp32
  double weight_decay = 0.04;
  double weight_decay_end = 0.4;
  double clip_grad = 3.0;      ///< 0 disables
  int64_t freeze_last_layer = 1;
  double lr = 0.0005;          ///< at global batch 256; scaled linearly
  int64_t warmup_epochs = 10;  ///< also read as scDINO's spelling `warump_epochs`
  double min_lr = 1e-6;
  std::string optimizer = "adamw";
  double drop_path_rate = 0.1;
  std::array<double, 2> global_crops_scale{0.14, 1.0};
  int64_t local_crops_number = 8;
  std::array<double, 2> local_crops_scale{0.05, 0.14};
  // Our keys.
  int64_t global_crops_size = 224;
  int64_t local_crops_size = 96;
  int64_t out_dim = 65536;
  int64_t head_hidden_dim = 2048;
  int64_t head_bottleneck_dim = 256;
  int64_t head_nlayers = 3;
  int64_t embed_dim = 0;  ///< 0: from arch
  int64_t depth = 0;      ///< 0: from arch
  int64_t num_heads = 0;  ///< 0: from arch
  double mlp_ratio = 4.0;
  double student_temp = 0.1;
  double center_momentum = 0.9;
};

/// Section `train_scDINO`.
struct TrainSection {
  std::string dino_vit_name = "scDINO_ViT";
  double fraction_for_mean_std_calc = 0.2;
  int64_t epochs = 100;
  int64_t saveckp_freq = 20;  ///< also keep checkpoint{epoch:04} every N epochs
  int64_t num_gpus = 1;
  int64_t batch_size_per_gpu = 24;
  int64_t num_workers = 8;
  std::string dist_url = "env://";
  HyperConfig hyperparameters;
};

/// Section `downstream_analyses` (read by the features and evaluation services).
struct DownstreamConfig {
  bool normalize = true;
  int64_t features_num_gpus = 1;
  int64_t features_batch_size_per_gpu = 24;
  int64_t features_num_workers = 8;
  std::string checkpoint_key = "teacher";
  bool resize = true;
  int64_t resize_length = 224;
  int64_t attention_images_per_class = 1;
  bool resize_attention_image = true;
  /// 0: the side the features were extracted at.
  int64_t attention_image_size = 0;
  std::vector<int64_t> knn_n_neighbors{10, 20, 100, 200};
  double knn_temperature = 0.07;
  int64_t umap_n_neighbors = 30;
  double umap_min_dist = 0.4;
  int64_t umap_n_components = 2;
  std::string umap_metric = "euclidean";
  double umap_spread = 1.1;
  int64_t umap_epochs = 100;
  bool umap_topometry_plots = false;
};

/// Section `scdino.augmentation`: the probabilities and ranges of the
/// multi-crop recipe (defaults: scDINO's).
struct AugmentationConfig {
  double hflip_p = 0.5;
  double vflip_p = 0.5;
  double brightness_p = 0.8;
  std::array<double, 2> brightness{0.5, 1.25};
  std::array<double, 3> blur_p{1.0, 0.1, 0.5};  ///< first global, second global, local
  std::array<double, 2> blur_sigma{0.1, 1.5};
  int64_t blur_kernel = 5;
  double solarize_p = 0.2;  ///< second global crop
  double solarize_threshold = 0.5;
};

/// Section `scdino.control`: the gRPC control API served by rank 0.
struct ControlConfig {
  bool enabled = true;
  /// host:port; port 0 picks a free port (the endpoint file says which).
  std::string listen = "0.0.0.0:0";
  /// The token file; empty: <run_dir>/control.token, created on first start.
  std::string token_file;
  /// PEM certificate and key of your own; both empty: the service makes a
  /// key and a self-signed certificate for each start (docs/control.md).
  std::string tls_cert_file, tls_key_file;
  /// Serve without TLS: the token travels in clear (a warning at start).
  bool plaintext = false;
};

/// Section `scdino.metrics`: the Prometheus endpoint of every process.
struct MetricsConfig {
  bool enabled = true;
  std::string listen = "0.0.0.0";
  /// 0 picks a free port; otherwise rank r uses port + local rank.
  int64_t port = 0;
  /// file_sd directory Prometheus reads; empty: <meta.output_dir>/prometheus_targets.
  std::string file_sd_dir;
  /// Seconds the endpoint stays up after the work ends (the last scrape).
  int64_t linger_seconds = 0;
};

/// Section `scdino.split`: which images are kNN training (reference) and
/// which are test (query) images, for scdino-features' index and scdino-eval.
struct SplitConfig {
  /// fraction: per class, a seeded random meta.train_datasetsplit_fraction
  /// of the images is train (seed meta.seed); folders: the first folder
  /// below the data set root says (train_folder or test_folder).
  std::string mode = "fraction";
  std::string train_folder = "Training";
  std::string test_folder = "Test";
};

/// Section `scdino.features`: scdino-features' work units and outputs.
struct FeaturesConfig {
  /// Images per shard file; shards are the unit of resume and are dealt out
  /// to the ranks round-robin.
  int64_t shard_size = 4096;
  /// Also write the features before L2 normalisation (features_raw.npy).
  bool write_raw = false;
};

/// Section `scdino.preflight`: what scdino-preflight measures before a job
/// trains, and the least each figure must reach (0: not judged).
struct PreflightConfig {
  /// The all-reduce sweep's message sizes: from min_bytes to max_bytes,
  /// times `factor` each (nccl-tests' -b, -e, -f).
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t factor = 8;
  /// Timed all-reduces of each size stop after this many, or once this
  /// long has passed (after one warm-up).
  int64_t iterations = 20;
  double seconds_per_size = 1.0;
  /// The least bus bandwidth (GB/s, nccl-tests' busbw) of the largest size.
  double min_busbw_gbps = 0.0;
  /// The most time (microseconds) the smallest all-reduce may take.
  double max_latency_us = 0.0;
  /// Files of the data set each node reads (whole, as a sample spread over
  /// the data set), and the least MB/s it must read them at.
  int64_t read_files = 256;
  double min_read_mbps = 0.0;
  /// The least free space in the run directory (GB).
  double min_free_gb = 1.0;
  /// The least free memory of each rank's GPU (GB).
  double min_gpu_free_gb = 0.0;
};

/// Section `scdino.evaluation`: scdino-eval's kNN and 2-D embeddings.
struct EvaluationConfig {
  /// Memory for one chunk of the query x train similarity matrix; queries
  /// are processed in chunks that fit.
  int64_t knn_memory_mb = 512;
  /// Patches an attention map may have: its cost grows with their square
  /// (eval/attention_maps.h); a larger image_size is drawn smaller.
  int64_t attention_max_tokens = 4096;
  /// Test rows the embeddings show: 0, all of them; else a seeded
  /// class-stratified subsample of at most this many.
  int64_t embedding_points = 0;
  /// Linear probe on the kNN's split (eval/linear_probe.h).
  bool linear_probe = true;
  /// k-means of the test rows, ARI and NMI against the classes, obs['kmeans'].
  bool kmeans = true;
  int64_t kmeans_restarts = 10;
  bool tsne = true;  ///< Barnes-Hut t-SNE (tsne.png, X_tsne)
  double tsne_perplexity = 30.0;
  int64_t tsne_iterations = 1000;
  bool umap = true;  ///< UMAP with downstream_analyses.umap_eval (umap.png, X_umap)
  /// Rows the trustworthiness of each embedding is measured on (a
  /// stratified subsample; 0: all embedded rows): exact, O(n^2 d).
  int64_t trustworthiness_points = 5000;
};

/// Section `scdino`: what scDINO's file does not say.
struct RuntimeConfig {
  /// auto | cuda | cpu: the GPU Slurm bound to the task (else the CPU),
  /// only a GPU, only the CPU (run::PickDevice resolves it at start, for
  /// each rank; the config keeps what the file says).
  std::string device = "auto";
  /// Mixed precision on CUDA: auto (bf16 when train.hyperparameters.use_fp16,
  /// as scDINO's flag, else fp32) | fp32 | bf16 | fp16 (with dynamic loss
  /// scaling). CPU runs always train in fp32.
  std::string precision = "auto";
  int64_t threads = 0;         ///< intra-op threads; 0: all cores
  /// scdino's CPU kernels: float32 matrix products on the libraries the
  /// build linked (SCDINO_CPU_GEMM: oneDNN, OpenBLAS), the one-pass AdamW
  /// and EMA, the fused crops; false: LibTorch's own ops (what a GPU runs).
  bool cpu_gemm = true;
  /// folder: meta.dataset_dir in class folders (labels at
  /// meta.folder_depth_for_labels); csv: index_csv; synthetic: generated in
  /// memory.
  std::string data_source = "folder";
  std::string index_csv;              ///< for data_source: csv (path,label rows)
  std::string on_bad_image = "fail";  ///< fail | skip
  /// stop: a non-finite loss stops the run naming the iteration; skip: the
  /// step changes nothing and is counted (nonfinite_steps in the log).
  std::string on_nonfinite_loss = "stop";
  /// Iterations between progress lines and health reports (DINO's 10).
  int64_t log_every = 10;
  /// What a collapse verdict does (docs/training.md): warn says so in the
  /// log, status and metrics; stop also checkpoints and fails the run;
  /// recover rolls back to the last checkpoint judged healthy and goes on
  /// with safer settings (training/train_plan.h), at most max_recoveries times.
  std::string on_collapse = "warn";
  int64_t max_recoveries = 2;
  /// manual: the file's values (and defaults); auto: what the file does not
  /// set is derived from the data set (plan/recipe.h).
  std::string recipe = "manual";
  /// auto: the trainer measures, at each numbered checkpoint, whether the
  /// teacher's features beat a random ViT's and the raw pixels
  /// (trainer/learning_check.h) and
  /// says at the end whether they did; require: also exit 7 when they did
  /// not; off: no check.
  std::string learning_check = "auto";
  /// Upper bound of the learning check's images in memory (MiB).
  int64_t learning_check_mb = 1024;
  /// How much better than a random ViT's and the raw pixels' 20-NN top-1
  /// the teacher's must be to count as learned (run/learning_verdict.h).
  double learning_margin = 0.0;
  /// The teacher's targets: center (DINO, scDINO) or sinkhorn_knopp
  /// (DINOv2's equipartition over the global batch).
  std::string teacher_centering = "center";
  /// KoLeo regulariser weight on the student's CLS features (DINOv2: 0.1).
  double koleo_loss_weight = 0.0;
  /// Distributed runs: seconds a rendezvous or collective may take before
  /// the rank gives up (a dead or hung peer), and the gradient bucket size.
  int64_t distributed_timeout_s = 300;
  int64_t bucket_mb = 25;
  bool cache_images = false;          ///< keep decoded images in memory
  /// Upper bound of that cache; images beyond it are read again each epoch.
  int64_t cache_max_mb = 8192;
  int64_t prefetch_batches = 4;
  /// Each epoch's order: global (a permutation of the whole set), blocks (a
  /// packed set read in blocks: blocks shuffled, then images within windows
  /// of shuffle_buffer images) or auto (blocks for a packed set).
  std::string shuffle = "auto";
  int64_t shuffle_buffer = 4096;
  /// Upper bound per rank of the packed set's blocks in memory (MiB); when
  /// the windows in flight need more, images are read one at a time.
  int64_t block_cache_mb = 2048;
  /// Staged copies of packed sets (scdino-pack --stage) kept per user and
  /// node, the newest by last use; older ones are removed. 0: keep all.
  int64_t stage_keep = 2;
  /// Also checkpoint (the resume point, checkpoint.safetensors) every this
  /// many minutes, so a crash loses minutes rather than an epoch; 0: only at
  /// epoch ends.
  double checkpoint_every_minutes = 0.0;
  /// Numbered checkpoints (checkpointNNNN.safetensors) kept; older ones are
  /// removed. 0: keep all.
  int64_t keep_checkpoints = 0;
  /// A checkpoint resumed on another number of ranks: global_batch keeps
  /// its global batch (batch_size_per_gpu becomes global batch / ranks,
  /// which must divide; the run then has the batches and schedules of an
  /// uninterrupted one); batch_per_gpu keeps batch_size_per_gpu (a new
  /// global batch: the learning rate is scaled to it, the schedules are
  /// laid over the new iterations per epoch, and the epoch goes on at the
  /// sample where it stopped).
  std::string elastic_resume = "global_batch";
  /// Each rank writes every step's data-set indices and schedule values to
  /// <run_dir>/samples/rank<N>.jsonl (what a resume on another world size
  /// is checked with).
  bool log_samples = false;
  /// Channel statistics JSON; read when it exists, else computed over
  /// fraction_for_mean_std_calc of the images and written there. Empty:
  /// <run_dir>/channel_stats.json.
  std::string stats_file;
  /// Mode of a run directory the service creates: 0750 (the group may read
  /// results) or 0700 (no one else).
  std::string run_dir_mode = "0750";
  data::SyntheticOptions synthetic;  ///< for data_source: synthetic
  AugmentationConfig augmentation;
  /// Which entry of selected_channel_combination_per_run this run trains.
  int64_t channel_combination = 0;
  ControlConfig control;
  MetricsConfig metrics;
  SplitConfig split;
  FeaturesConfig features;
  EvaluationConfig evaluation;
  PreflightConfig preflight;
};

struct RunConfig {
  MetaConfig meta;
  TrainSection train;
  DownstreamConfig downstream;
  RuntimeConfig scdino;
  std::string source_path;  ///< the YAML file it came from
  std::string source_text;  ///< its text, kept in every checkpoint
  /// Keys that were read and are ignored, each with why (shown once at
  /// start by the services).
  std::vector<std::string> warnings;
  /// Keys the file sets (canonical paths), which scdino.recipe: auto keeps.
  std::set<std::string> given_keys;

  /// output_dir/name_of_run; with several channel combinations, each one's
  /// folder under it (combination_dir): each combination is a run of its own.
  std::string run_dir() const;
  /// output_dir/name_of_run whatever the combinations: the folder that holds
  /// every combination's run and what they share.
  std::string name_of_run_dir() const;
  /// The run as metrics labels, the control API and reports name it:
  /// name_of_run, or name_of_run/<combination_dir> with several combinations.
  std::string run_name() const;
  /// scDINO's folder name of combination `index`: <dino_vit_name>_channel_
  /// and the channel names (meta.channel_dict) joined by _.
  std::string combination_dir(int64_t index) const;
  std::string stats_path() const;  ///< with several combinations, shared: <output_dir>/<name_of_run>/
  std::string token_path() const;
  std::string file_sd_dir() const;
  /// Where scdino-features writes the features of a checkpoint (or "random_init").
  std::string features_dir(const std::string& name) const;
  /// Where scdino-eval writes the results of a features directory's name.
  std::string eval_dir(const std::string& name) const;
  /// The channels this run trains on, in order.
  const std::vector<int64_t>& channels() const;
  /// Those channels with their names (meta.channel_dict; the index as text
  /// where it names none); with `index`, those of that combination.
  std::vector<std::pair<int64_t, std::string>> named_channels() const;
  std::vector<std::pair<int64_t, std::string>> named_channels(int64_t index) const;
  /// The one check that `what` (a data source, a checkpoint's model) has as
  /// many input channels as the config selects; the error names both counts,
  /// the config and the key that selects them.
  Status CheckChannelCount(int64_t got, const std::string& what) const;
  /// The model on `device` (run::PickDevice's); `bf16_supported`: whether
  /// that GPU has bf16 arithmetic (compute capability >= 8.0), which
  /// decides precision auto.
  model::DinoOptions dino_options(torch::Device device = torch::kCPU, bool bf16_supported = true) const;
  /// The precision this run trains in on `device`: fp32 on the CPU,
  /// scdino.precision resolved for a GPU.
  model::Precision precision(torch::Device device = torch::kCPU, bool bf16_supported = true) const;
  model::ScheduleOptions schedule_options(int64_t niter_per_epoch, int64_t world_size) const;
  /// Crop sizes, scales, augmentation and seed (normalisation is filled from
  /// the channel statistics).
  data::MultiCropOptions multicrop_options() const;
  data::ImagePrep image_prep() const;
  data::BadImagePolicy bad_image_policy() const;
};

/// The checks across keys (crops against the patch, warm-ups against the
/// epochs, ...), as ParseRunConfig makes them.
Status CheckConfig(const RunConfig& c);

/// One key set after the file was read (a recipe's value, an elastic
/// resume's batch, a recovery's setting, a command-line flag): the key's
/// full path and its value as YAML.
struct KeyValue {
  std::string key, value;
};

/// A new config: `c` with `values` read as the file's keys are (the same
/// validation), then the checks across keys. `c` itself never changes:
/// after parsing, a config is only ever replaced whole. Every value is set,
/// whatever the file says (a caller whose file wins leaves its keys out:
/// run::WithRecipe). Errors start with c.source_path and say "with the
/// derived settings".
StatusOr<RunConfig> WithValues(const RunConfig& c, const std::vector<KeyValue>& values);

/// Parses and validates YAML text; `origin` (the path) starts every error.
/// With scdino.recipe: auto the checks across keys wait for the recipe
/// (WithValues makes them).
StatusOr<RunConfig> ParseRunConfig(const std::string& yaml_text, const std::string& origin);
StatusOr<RunConfig> LoadRunConfig(const std::string& path);

/// The named channels (RunConfig::named_channels) of a config's YAML text,
/// such as a checkpoint records (features::ExportOptions::channels_of_config).
StatusOr<std::vector<std::pair<int64_t, std::string>>> NamedChannelsOf(const std::string& yaml_text,
                                                                        const std::string& origin);

}  // namespace scdino::run
