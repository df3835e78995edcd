#include "config/config_schema.h"

#include "config/config_fields.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

namespace scdino::run {
namespace {

// ---- The table.

struct Key {
  std::string path;
  Field field;
  std::string meaning;
  std::vector<std::string> aliases = {};
  std::string ignored = {};
};

constexpr auto kIn = Bound::kIn;
constexpr auto kEx = Bound::kEx;

std::vector<Key> Table(RunConfig& c, std::optional<YAML::Node>* combos) {
  auto& m = c.meta;
  auto& t = c.train;
  auto& h = c.train.hyperparameters;
  auto& d = c.downstream;
  auto& r = c.scdino;
  auto& a = c.scdino.augmentation;
  const std::string H = "train_scDINO.hyperparameters.";
  const std::string F = "downstream_analyses.compute_cls_features.";
  const std::string U = "downstream_analyses.umap_eval.";
  const std::string A = "scdino.augmentation.";
  const std::string ranks_from_launch =
      "the number of ranks comes from the launch (Slurm tasks, or torchrun's WORLD_SIZE), one per GPU";
  return {
      {"meta.name_of_run", Str(&m.name_of_run), "run directory name under `output_dir`"},
      {"meta.output_dir", Str(&m.output_dir), "where run directories go"},
      {"meta.dataset_dir", Str(&m.dataset_dir), "image root of the folder data source"},
      {"meta.folder_depth_for_labels", Int(&m.folder_depth_for_labels, 0),
       "which folder above an image names its class (0: the one holding it)"},
      {"meta.train_datasetsplit_fraction", Real(&m.train_datasetsplit_fraction, 0, kEx, 1, kIn),
       "train share of scdino-features' seeded per-class split"},
      {"meta.seed", Int(&m.seed, 0), "seeds crops, epoch order, stochastic depth, initial weights and the split"},
      {"meta.images_are_RGB", Bool(&m.images_are_RGB), "",
       {},
       "images are read with all their channels (RGB ones as 3); select channels with "
       "selected_channel_combination_per_run"},
      {"meta.channel_dict", ChannelDict(&m.channel_dict), "channel names, e.g. {0: DAPI, 1: BF}"},
      {"meta.selected_channel_combination_per_run",
       ChannelCombinations(combos, &m.selected_channel_combination_per_run),
       "channel combinations: strings of one hexadecimal character per channel (\"024\", \"0a\" for 0 and 10, as "
       "scDINO), or lists of indices ([16, 17]) or channel_dict names"},
      {"meta.center_crop", Int(&m.center_crop, 0), "center crop in pixels before everything else; 0: none"},

      {"train_scDINO.dino_vit_name", Str(&t.dino_vit_name), "the model's name (scDINO names its output folder by it)"},
      {"train_scDINO.fraction_for_mean_std_calc", Real(&t.fraction_for_mean_std_calc, 0, kEx, 1, kIn),
       "share of the images the channel statistics are computed on"},
      {"train_scDINO.epochs", Int(&t.epochs, 1), "training epochs"},
      {"train_scDINO.saveckp_freq", Int(&t.saveckp_freq, 1),
       "keep a numbered checkpoint (checkpointNNNN.safetensors) every N epochs, and after the last"},
      {"train_scDINO.num_gpus", Int(&t.num_gpus, 1), "", {}, ranks_from_launch},
      {"train_scDINO.batch_size_per_gpu", Int(&t.batch_size_per_gpu, 1), "images per rank and step"},
      {"train_scDINO.num_workers", Int(&t.num_workers, 0), "image reading and decoding threads per rank"},
      {"train_scDINO.dist_url", Str(&t.dist_url), "",
       {},
       "ranks meet at the address the launch gives (the first node of the Slurm step, or MASTER_ADDR/MASTER_PORT)"},
      {H + "arch", Str(&h.arch, {"vit_tiny", "vit_small", "vit_base"}), "ViT preset: 192/384/768 dims, 12 blocks, 3/6/12 heads"},
      {H + "patch_size", Int(&h.patch_size, 1), "patch side in pixels"},
      {H + "norm_last_layer", Bool(&h.norm_last_layer), "keep the head's last layer weight-normalised with norm 1"},
      {H + "momentum_teacher", Real(&h.momentum_teacher, 0, kIn, 1, kIn), "start of the teacher EMA momentum (cosine to 1)"},
      {H + "use_bn_in_head", Bool(&h.use_bn_in_head), "batch norm in the head: only false is supported"},
      {H + "warmup_teacher_temp", Real(&h.warmup_teacher_temp, 0, kEx), "teacher temperature at the start of its warm-up"},
      {H + "teacher_temp", Real(&h.teacher_temp, 0, kEx), "teacher temperature after the warm-up", {"techer_temp"}},
      {H + "warmup_teacher_temp_epochs", Int(&h.warmup_teacher_temp_epochs, 0),
       "epochs of linear teacher-temperature warm-up (at most epochs)"},
      {H + "use_fp16", Bool(&h.use_fp16), "mixed precision on GPUs (see scdino.precision); CPU runs stay fp32"},
      {H + "weight_decay", Real(&h.weight_decay, 0, kIn), "weight decay at the start (cosine schedule)"},
      {H + "weight_decay_end", Real(&h.weight_decay_end, 0, kIn), "weight decay at the end"},
      {H + "clip_grad", Real(&h.clip_grad, 0, kIn), "per-parameter gradient-norm clip; 0: off"},
      {H + "freeze_last_layer", Int(&h.freeze_last_layer, 0), "epochs during which the head's last layer is frozen"},
      {H + "lr", Real(&h.lr, 0, kEx), "peak learning rate at a global batch of 256 (scaled linearly)"},
      {H + "warmup_epochs", Int(&h.warmup_epochs, 0), "epochs of linear lr warm-up (at most epochs)", {"warump_epochs"}},
      {H + "min_lr", Real(&h.min_lr, 0, kIn), "learning rate at the end of the cosine"},
      {H + "optimizer", Str(&h.optimizer, {"adamw"}), "the optimiser"},
      {H + "drop_path_rate", Real(&h.drop_path_rate, 0, kIn, 1, kEx), "student stochastic depth of the last block"},
      {H + "global_crops_scale", Range2(&h.global_crops_scale, 0, 1), "area range of the 2 global crops"},
      {H + "local_crops_number", Int(&h.local_crops_number, 0), "local crops per image"},
      {H + "local_crops_scale", Range2(&h.local_crops_scale, 0, 1), "area range of the local crops"},
      {H + "global_crops_size", Int(&h.global_crops_size, 1), "global crop side in pixels (a multiple of patch_size)"},
      {H + "local_crops_size", Int(&h.local_crops_size, 1), "local crop side in pixels (a multiple of patch_size)"},
      {H + "out_dim", Int(&h.out_dim, 1), "prototypes of the DINO head"},
      {H + "head_hidden_dim", Int(&h.head_hidden_dim, 1), "hidden width of the head's MLP"},
      {H + "head_bottleneck_dim", Int(&h.head_bottleneck_dim, 1), "bottleneck before the last layer"},
      {H + "head_nlayers", Int(&h.head_nlayers, 1), "layers of the head's MLP"},
      {H + "embed_dim", Int(&h.embed_dim, 0), "ViT width; 0: from arch"},
      {H + "depth", Int(&h.depth, 0), "ViT blocks; 0: from arch"},
      {H + "num_heads", Int(&h.num_heads, 0), "attention heads (embed_dim must be a multiple); 0: from arch"},
      {H + "mlp_ratio", Real(&h.mlp_ratio, 0, kEx), "block MLP width as a multiple of embed_dim"},
      {H + "student_temp", Real(&h.student_temp, 0, kEx), "student softmax temperature"},
      {H + "center_momentum", Real(&h.center_momentum, 0, kIn, 1, kIn), "EMA momentum of the teacher center"},

      {F + "normalize", Bool(&d.normalize), "L2-normalise the features (features.npy)"},
      {F + "num_gpus", Int(&d.features_num_gpus, 1), "", {}, ranks_from_launch},
      {F + "batch_size_per_gpu", Int(&d.features_batch_size_per_gpu, 1), "images per forward pass of scdino-features; on a GPU 256 unless the file sets it"},
      {F + "num_workers", Int(&d.features_num_workers, 0), "image decoding threads of scdino-features"},
      {F + "checkpoint_key", Str(&d.checkpoint_key, {"teacher", "student"}), "which backbone gives the features"},
      {F + "resize", Bool(&d.resize), "resize images to resize_length before the forward pass"},
      {F + "resize_length", Int(&d.resize_length, 1), "model input side when resizing"},
      {"downstream_analyses.attention_visualisation.num_images_per_class", Int(&d.attention_images_per_class, 0),
       "attention maps drawn per class by scdino-eval"},
      {"downstream_analyses.attention_visualisation.resize_attention_image", Bool(&d.resize_attention_image),
       "resize images to image_size for the attention maps"},
      {"downstream_analyses.attention_visualisation.image_size", Int(&d.attention_image_size, 0),
       "input side of the attention maps; 0: the side the features were extracted at"},
      {"downstream_analyses.kNN.global.n_neighbors", IntList(&d.knn_n_neighbors, 1), "k of the weighted kNN"},
      {"downstream_analyses.kNN.global.temperature", Real(&d.knn_temperature, 0, kEx), "kNN vote temperature"},
      {U + "n_neighbors", Int(&d.umap_n_neighbors, 2), "UMAP neighbourhood size (the point itself counted)"},
      {U + "min_dist", Real(&d.umap_min_dist, 0, kIn), "UMAP minimum distance between embedded points (at most spread)"},
      {U + "n_components", Int(&d.umap_n_components, 1), "UMAP output dimensions (the figure shows the first two)"},
      {U + "metric", Str(&d.umap_metric, {"euclidean", "cosine"}), "UMAP input metric"},
      {U + "spread", Real(&d.umap_spread, 0, kEx), "UMAP scale of the embedded clusters"},
      {U + "epochs", Int(&d.umap_epochs, 1), "UMAP layout epochs"},
      {U + "topometry_plots", Bool(&d.umap_topometry_plots), "", {}, "TopOMetry plots are not drawn"},

      {"scdino.device", Str(&r.device, {"cpu", "cuda", "auto"}),
       "auto: the GPU Slurm bound to the task (or its local rank's, one task per GPU) where one is visible, else "
       "the CPU, said with why on each rank's first line; a task Slurm bound a GPU to that CUDA cannot see (no "
       "driver in the container, a CPU build) exits 2 naming what it saw, never trains on the CPU; cuda: the GPU, or "
       "an error naming the task where it has none; cpu: the CPU even where GPUs are (on purpose)"},
      {"scdino.precision", Str(&r.precision, {"auto", "fp32", "bf16", "fp16"}),
       "CUDA autocast; auto: bf16 when use_fp16 (fp16 with loss scaling before compute capability 8.0), else fp32"},
      {"scdino.threads", Int(&r.threads, 0), "intra-op CPU threads; 0: all cores"},
      {"scdino.cpu_gemm", Bool(&r.cpu_gemm),
       "scdino's CPU kernels: float32 matrix products on the libraries the build linked (oneDNN, OpenBLAS: the "
       "start-up line and --version name them), the one-pass AdamW and EMA, the fused crops; false: LibTorch's "
       "own ops, the path a GPU runs (docs/performance.md)"},
      {"scdino.data_source", Str(&r.data_source, {"folder", "csv", "synthetic"}),
       "folder: meta.dataset_dir in class folders; csv: index_csv; synthetic: generated in memory"},
      {"scdino.index_csv", Str(&r.index_csv), "for the csv data source: rows path,label"},
      {"scdino.on_bad_image", Str(&r.on_bad_image, {"fail", "skip"}), "a bad image stops the run naming it, or is skipped and counted"},
      {"scdino.on_nonfinite_loss", Str(&r.on_nonfinite_loss, {"stop", "skip"}),
       "a non-finite loss stops the run naming the iteration, or the step is skipped and counted"},
      {"scdino.log_every", Int(&r.log_every, 1),
       "iterations between progress lines on stderr and health reports (status, metrics)"},
      {"scdino.on_collapse", Str(&r.on_collapse, {"warn", "stop", "recover"}),
       "a collapse verdict (docs/training.md) is reported; stop also stops the run after a checkpoint (exit 5); "
       "recover rolls back to the last healthy checkpoint and goes on with safer settings"},
      {"scdino.max_recoveries", Int(&r.max_recoveries, 1, 10),
       "on_collapse: recover rolls back at most this many times; a collapse after that stops the run (exit 5)"},
      {"scdino.recipe", Str(&r.recipe, {"manual", "auto"}),
       "auto: epochs, warm-ups, lr, teacher temperature and momentum, crops, patch and out_dim derived from the data "
       "set's size, image size and the batch, for every key the file does not set (docs/training.md)"},
      {"scdino.learning_check", Str(&r.learning_check, {"auto", "require", "off"}),
       "auto: at each numbered checkpoint a 20-NN accuracy of the teacher on a held-out split against a random ViT "
       "and the raw pixels, where the data set has labels (docs/training.md); require: also exit 7 when the run "
       "ends no better than either"},
      {"scdino.learning_margin", Real(&r.learning_margin, 0, kIn, 1, kIn),
       "how much higher than both baselines' (a random ViT's, the raw pixels') the teacher's 20-NN top-1 must be "
       "for the run to count as learned"},
      {"scdino.teacher_centering", Str(&r.teacher_centering, {"center", "sinkhorn_knopp"}),
       "the teacher's targets: DINO's centred, sharpened outputs (center_momentum), or DINOv2's Sinkhorn-Knopp "
       "equipartition over the global batch (docs/training.md)"},
      {"scdino.koleo_loss_weight", Real(&r.koleo_loss_weight, 0, kIn),
       "weight of DINOv2's KoLeo regulariser, which spreads the student's CLS features; 0: off"},
      {"scdino.distributed_timeout_s", Int(&r.distributed_timeout_s, 1),
       "seconds a rendezvous or collective may take before a rank gives up (dead or hung peer)"},
      {"scdino.bucket_mb", Int(&r.bucket_mb, 1), "gradient all-reduce bucket size"},
      {"scdino.cache_images", Bool(&r.cache_images), "keep decoded images in memory"},
      {"scdino.cache_max_mb", Int(&r.cache_max_mb, 1), "upper bound of that cache per rank; beyond it images are read again"},
      {"scdino.prefetch_batches", Int(&r.prefetch_batches, 1), "batches decoded ahead"},
      {"scdino.shuffle", Str(&r.shuffle, {"auto", "global", "blocks"}),
       "each epoch's order: global (a permutation of the whole set), blocks (a packed set read in large blocks: "
       "the blocks shuffled, then the images within windows of shuffle_buffer images) or auto (blocks for a "
       "packed set, else global) (docs/data.md)"},
      {"scdino.shuffle_buffer", Int(&r.shuffle_buffer, 1),
       "images shuffled together under shuffle: blocks (rounded down to whole blocks; each rank keeps about "
       "three times this many raw images in memory, more with many ranks, within block_cache_mb)"},
      {"scdino.block_cache_mb", Int(&r.block_cache_mb, 1),
       "upper bound per rank of the packed set's blocks held in memory under shuffle: blocks; when the windows "
       "in flight need more (many ranks, large images), images are read one at a time instead: the same order, "
       "more reads"},
      {"scdino.learning_check_mb", Int(&r.learning_check_mb, 1),
       "upper bound of the learning check's images in memory (float32 at the crop size): up to 1,000 held out and "
       "2,000 neighbours, fewer when they need more"},
      {"scdino.stage_keep", Int(&r.stage_keep, 0),
       "staged copies of packed data sets (deploy/slurm, node-local storage) kept per user and node, the newest by "
       "last use; older ones are removed; 0: all"},
      {"scdino.checkpoint_every_minutes", Real(&r.checkpoint_every_minutes, 0, kIn),
       "also write the resume checkpoint every this many minutes (a crash loses minutes, not an epoch); 0: off"},
      {"scdino.keep_checkpoints", Int(&r.keep_checkpoints, 0), "numbered checkpoints kept, oldest removed first; 0: all"},
      {"scdino.elastic_resume", Str(&r.elastic_resume, {"global_batch", "batch_per_gpu"}),
       "a checkpoint resumed on another number of ranks keeps its global batch (each rank takes global batch / "
       "ranks: the same batches and schedules as an uninterrupted run) or batch_size_per_gpu (a new global batch, "
       "learning rate scaled to it; the epoch goes on where it stopped) (docs/distributed.md)"},
      {"scdino.log_samples", Bool(&r.log_samples),
       "each rank writes the data-set indices and schedule values of every step to <run_dir>/samples/rank<N>.jsonl"},
      {"scdino.run_dir_mode", Str(&r.run_dir_mode, {"0750", "0700"}),
       "mode of a run directory the service creates (the group may read results, or no one else); an existing one "
       "that others can write, or that is not yours, is refused"},
      {"scdino.stats_file", Str(&r.stats_file), "channel statistics file, read when it is for this data set; \"\": <run_dir>/channel_stats.json, or with several channel combinations <output_dir>/<name_of_run>/channel_stats.json, shared"},
      {A + "hflip_p", Real(&a.hflip_p, 0, kIn, 1, kIn), "horizontal flip probability of every crop"},
      {A + "vflip_p", Real(&a.vflip_p, 0, kIn, 1, kIn), "vertical flip probability of every crop"},
      {A + "brightness_p", Real(&a.brightness_p, 0, kIn, 1, kIn), "probability of a per-channel brightness factor"},
      {A + "brightness", Range2(&a.brightness, 0, 100), "range of the brightness factor"},
      {A + "blur_p", Probabilities3(&a.blur_p), "Gaussian blur probability: first global, second global, local crops"},
      {A + "blur_sigma", Range2(&a.blur_sigma, 0, 100), "range of the blur's sigma"},
      {A + "blur_kernel", Int(&a.blur_kernel, 1, 31), "blur taps (odd)"},
      {A + "solarize_p", Real(&a.solarize_p, 0, kIn, 1, kIn), "solarisation probability of the second global crop"},
      {A + "solarize_threshold", Real(&a.solarize_threshold, 0, kIn, 1, kIn), "values above it become 1 - value"},
      {"scdino.channel_combination", Int(&r.channel_combination, 0),
       "which entry of meta.selected_channel_combination_per_run this run uses"},
      {"scdino.control.enabled", Bool(&r.control.enabled), "rank 0 serves the control API"},
      {"scdino.control.listen", Str(&r.control.listen),
       "host:port of the control API; 0.0.0.0: every interface of the node (port 0: a free one)"},
      {"scdino.control.token_file", Str(&r.control.token_file), "the run's token; \"\": <run_dir>/control.token"},
      {"scdino.control.tls_cert_file", Str(&r.control.tls_cert_file),
       "your own PEM certificate (with tls_key_file); \"\": a key and self-signed certificate made at each start, "
       "which scdinoctl pins (docs/control.md)"},
      {"scdino.control.tls_key_file", Str(&r.control.tls_key_file), "the PEM key of tls_cert_file"},
      {"scdino.control.plaintext", Bool(&r.control.plaintext),
       "serve the control API without TLS: the token travels in clear (a warning at start)"},
      {"scdino.metrics.enabled", Bool(&r.metrics.enabled), "every process exports Prometheus metrics"},
      {"scdino.metrics.listen", Str(&r.metrics.listen), "IPv4 address of the metrics endpoint, and the address its file_sd target names; 0.0.0.0: every "
       "interface, and the target names the full host name"},
      {"scdino.metrics.port", Int(&r.metrics.port, 0, 65535), "metrics port; 0: a free one, else port + local rank"},
      {"scdino.metrics.file_sd_dir", Str(&r.metrics.file_sd_dir),
       "where each process writes its Prometheus file_sd target; \"\": <meta.output_dir>/prometheus_targets"},
      {"scdino.metrics.linger_seconds", Int(&r.metrics.linger_seconds, 0, 3600),
       "seconds the metrics stay up after the work ends, so Prometheus's last scrape sees the final values "
       "(at least the scrape interval for the last evaluation of a follower); a stop signal ends it"},
      {"scdino.split.mode", Str(&r.split.mode, {"fraction", "folders"}),
       "train/test assignment: a seeded per-class fraction, or by folder"},
      {"scdino.split.train_folder", Str(&r.split.train_folder), "for folders: the folder name marking train images"},
      {"scdino.split.test_folder", Str(&r.split.test_folder), "for folders: the folder name marking test images"},
      {"scdino.features.shard_size", Int(&r.features.shard_size, 1), "images per feature shard (unit of resume and of work)"},
      {"scdino.features.write_raw", Bool(&r.features.write_raw), "also write features_raw.npy"},
      {"scdino.evaluation.knn_memory_mb", Int(&r.evaluation.knn_memory_mb, 1), "memory of one chunk of kNN similarities"},
      {"scdino.evaluation.attention_max_tokens", Int(&r.evaluation.attention_max_tokens, 1),
       "patches an attention map may have (its memory grows with their square); a larger image_size is drawn "
       "smaller, with a warning"},
      {"scdino.evaluation.embedding_points", Int(&r.evaluation.embedding_points, 0),
       "test rows in the 2-D embeddings (a stratified subsample); 0: every test row"},
      {"scdino.evaluation.linear_probe", Bool(&r.evaluation.linear_probe),
       "fit a linear probe (L2 logistic regression, C chosen on a validation part) on the kNN's split"},
      {"scdino.evaluation.kmeans", Bool(&r.evaluation.kmeans),
       "k-means of the test rows (k = classes): ARI and NMI against the classes, obs['kmeans'] in the .h5ad"},
      {"scdino.evaluation.kmeans_restarts", Int(&r.evaluation.kmeans_restarts, 1),
       "k-means restarts (k-means++ seeding); the lowest inertia is kept"},
      {"scdino.evaluation.tsne", Bool(&r.evaluation.tsne), "draw the Barnes-Hut t-SNE of the test rows"},
      {"scdino.evaluation.tsne_perplexity", Real(&r.evaluation.tsne_perplexity, 1, kIn, 1000, kIn), "t-SNE perplexity"},
      {"scdino.evaluation.tsne_iterations", Int(&r.evaluation.tsne_iterations, 1), "t-SNE iterations"},
      {"scdino.evaluation.umap", Bool(&r.evaluation.umap), "draw the UMAP of the test rows (downstream_analyses.umap_eval)"},
      {"scdino.evaluation.trustworthiness_points", Int(&r.evaluation.trustworthiness_points, 0),
       "rows each embedding's trustworthiness(10) is measured on (stratified); 0: all embedded rows"},
      {"scdino.preflight.min_bytes", Int(&r.preflight.min_bytes, 4, int64_t{8} << 30),
       "smallest all-reduce of the sweep (bytes)"},
      {"scdino.preflight.max_bytes", Int(&r.preflight.max_bytes, 4, int64_t{8} << 30),
       "largest all-reduce of the sweep (bytes; each rank holds it in memory)"},
      {"scdino.preflight.factor", Int(&r.preflight.factor, 2, 1024), "each size of the sweep is this many times the last"},
      {"scdino.preflight.iterations", Int(&r.preflight.iterations, 1), "timed all-reduces of each size, at most"},
      {"scdino.preflight.seconds_per_size", Real(&r.preflight.seconds_per_size, 0, kEx, 3600, kIn),
       "time after which a size's timed all-reduces stop"},
      {"scdino.preflight.min_busbw_gbps", Real(&r.preflight.min_busbw_gbps, 0, kIn),
       "least bus bandwidth (GB/s, as nccl-tests) of the largest all-reduce; 0: not judged"},
      {"scdino.preflight.max_latency_us", Real(&r.preflight.max_latency_us, 0, kIn),
       "most microseconds the smallest all-reduce may take; 0: not judged"},
      {"scdino.preflight.read_files", Int(&r.preflight.read_files, 0), "data-set files each node reads; 0: none"},
      {"scdino.preflight.min_read_mbps", Real(&r.preflight.min_read_mbps, 0, kIn),
       "least MB/s each node reads the data set at; 0: not judged"},
      {"scdino.preflight.min_free_gb", Real(&r.preflight.min_free_gb, 0, kIn),
       "least free space in the run directory (GB); 0: not judged"},
      {"scdino.preflight.min_gpu_free_gb", Real(&r.preflight.min_gpu_free_gb, 0, kIn),
       "least free memory of each rank's GPU (GB); 0: not judged"},
      {"scdino.synthetic.classes", Int(&r.synthetic.classes, 1), "synthetic data: classes"},
      {"scdino.synthetic.per_class", Int(&r.synthetic.per_class, 1), "synthetic data: images per class"},
      {"scdino.synthetic.channels", Int(&r.synthetic.channels, 1), "synthetic data: channels"},
      {"scdino.synthetic.size", Int(&r.synthetic.size, 8), "synthetic data: image side"},
      {"scdino.synthetic.seed", Uint(&r.synthetic.seed), "synthetic data: seed"},
      {"scdino.synthetic.difficulty", Real(&r.synthetic.difficulty, 0, kIn, 1, kIn),
       "synthetic data: 0 classes differ plainly; towards 1 nuisances dominate"},
  };
}

std::string Parent(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string Last(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The keys directly under `section` ("" for the top level): leaves of the
// table and the sections leading to deeper ones, in table order.
std::vector<std::string> ChildrenOf(const std::vector<Key>& keys, const std::string& section) {
  std::vector<std::string> out;
  const std::string prefix = section.empty() ? "" : section + ".";
  for (const auto& k : keys) {
    if (k.path.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string rest = k.path.substr(prefix.size());
    const std::string child = rest.substr(0, rest.find('.'));
    if (std::find(out.begin(), out.end(), child) == out.end()) out.push_back(child);
  }
  return out;
}

// "unknown key 'PATH' (known keys of SECTION: a, b, ...)": the message of a
// key the table lacks, in the file or in a --set.
std::string UnknownKey(const std::vector<Key>& keys, const std::string& section, const std::string& path) {
  std::string known;
  for (const auto& ch : ChildrenOf(keys, section)) known += (known.empty() ? "" : ", ") + ch;
  return "unknown key '" + path + "' (known keys" + (section.empty() ? "" : " of " + section) + ": " + known + ")";
}

Status ReadMapping(const YAML::Node& node, const std::string& section, const std::vector<Key>& keys, RunConfig* c) {
  if (!node.IsMap()) return Bad(node, section.empty() ? "the file" : section, "a mapping of keys");
  const auto children = ChildrenOf(keys, section);
  std::set<std::string> seen;
  for (auto it = node.begin(); it != node.end(); ++it) {
    const std::string k = it->first.Scalar();
    const std::string path = section.empty() ? k : section + "." + k;
    const Key* leaf = nullptr;
    for (const auto& key : keys) {
      if (Parent(key.path) != section) continue;
      if (Last(key.path) == k || std::find(key.aliases.begin(), key.aliases.end(), k) != key.aliases.end()) leaf = &key;
    }
    const bool is_section = !leaf && std::find(children.begin(), children.end(), k) != children.end();
    if (!leaf && !is_section) {
      std::ostringstream ss;
      if (it->first.Mark().line >= 0) ss << "line " << it->first.Mark().line + 1 << ": ";
      ss << UnknownKey(keys, section, path);
      return Status::InvalidArgument(ss.str());
    }
    const std::string canonical = leaf ? leaf->path : path;
    if (!seen.insert(canonical).second) {
      return Bad(it->first, path, "'" + Last(canonical) + "' given only once (it also has another spelling)");
    }
    if (leaf) c->given_keys.insert(canonical);
    if (is_section) {
      if (auto s = ReadMapping(it->second, path, keys, c); !s.ok()) return s;
      continue;
    }
    if (auto s = leaf->field.read(it->second, path); !s.ok()) return s;
    if (!leaf->ignored.empty()) c->warnings.push_back(leaf->path + " is ignored: " + leaf->ignored);
  }
  return Status::Ok();
}

}  // namespace

Status ReadConfigKeys(const YAML::Node& root, RunConfig* c) {
  std::optional<YAML::Node> combos;
  const auto keys = Table(*c, &combos);
  if (auto s = ReadMapping(root, "", keys, c); !s.ok()) return s;
  if (combos) {
    return ResolveCombinations(*combos, "meta.selected_channel_combination_per_run", c->meta.channel_dict,
                               &c->meta.selected_channel_combination_per_run);
  }
  return Status::Ok();
}

namespace {

// A copy of `n` whose nodes carry no mark: a setting's value has no line in
// the file, so an error about it names none.
YAML::Node Unmarked(const YAML::Node& n) {
  if (n.IsScalar()) return YAML::Node(n.Scalar());
  if (n.IsSequence()) {
    YAML::Node out(YAML::NodeType::Sequence);
    for (const auto& e : n) out.push_back(Unmarked(e));
    return out;
  }
  if (n.IsMap()) {
    YAML::Node out(YAML::NodeType::Map);
    for (auto it = n.begin(); it != n.end(); ++it) out[it->first.Scalar()] = Unmarked(it->second);
    return out;
  }
  return YAML::Node();
}

}  // namespace

Status MergeSettings(const std::vector<std::string>& settings, YAML::Node* root) {
  RunConfig scratch;
  std::optional<YAML::Node> combos;
  const auto keys = Table(scratch, &combos);
  YAML::Node merged = YAML::Clone(*root);
  for (const std::string& setting : settings) {
    auto bad = [&](const std::string& why) { return Status::InvalidArgument("--set " + setting + ": " + why); };
    const auto eq = setting.find('=');
    if (eq == std::string::npos || eq == 0) {
      return bad("expected KEY=VALUE with a key's full path (train_scDINO.epochs=50; docs/config.md lists the keys)");
    }
    const std::string path = setting.substr(0, eq), text = setting.substr(eq + 1);
    const Key* key = nullptr;
    for (const auto& k : keys) {
      const bool alias = Parent(k.path) == Parent(path) &&
                         std::find(k.aliases.begin(), k.aliases.end(), Last(path)) != k.aliases.end();
      if (k.path == path || alias) key = &k;
    }
    if (!key) {
      // The known keys of the deepest section the path names.
      std::string section = Parent(path);
      while (!section.empty() && ChildrenOf(keys, section).empty()) section = Parent(section);
      return bad(UnknownKey(keys, section, path));
    }
    YAML::Node value;
    try {
      value = Unmarked(YAML::Load(text));
    } catch (const YAML::Exception& e) {
      return bad("the value is not YAML: " + e.msg);
    }
    if (Status s = key->field.read(value, key->path); !s.ok()) return bad(s.message());
    // The sections down to the key, made where the document has none.
    YAML::Node at = merged;
    std::string rest = key->path;
    for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
      const std::string part = rest.substr(0, dot);
      if (!at[part].IsMap()) at[part] = YAML::Node(YAML::NodeType::Map);
      at.reset(at[part]);
      rest = rest.substr(dot + 1);
    }
    for (const auto& alias : key->aliases) at.remove(alias);
    at[rest] = value;
  }
  *root = merged;
  return Status::Ok();
}

StatusOr<RunConfig> WithValues(const RunConfig& c, const std::vector<KeyValue>& values) {
  RunConfig out = c;
  std::optional<YAML::Node> unused;
  const auto keys = Table(out, &unused);
  for (const auto& v : values) {
    YAML::Node node;
    try {
      node = YAML::Load(v.value);
    } catch (const YAML::Exception&) {
      return Status::InvalidArgument("the value of " + v.key + " is not YAML: " + v.value);
    }
    const auto key = std::find_if(keys.begin(), keys.end(), [&](const Key& k) { return k.path == v.key; });
    if (key == keys.end()) return Status::InvalidArgument("unknown key '" + v.key + "'");
    if (auto s = key->field.read(node, v.key); !s.ok()) return s;
  }
  if (auto s = CheckConfig(out); !s.ok()) {
    return Status::InvalidArgument(c.source_path + " with the derived settings: " + s.message());
  }
  return out;
}

std::vector<KeyDoc> ConfigKeys() {
  RunConfig defaults;
  std::optional<YAML::Node> unused;
  std::vector<KeyDoc> out;
  for (const auto& k : Table(defaults, &unused)) {
    out.push_back({k.path, k.aliases, k.field.type, k.field.show(), k.meaning, k.ignored});
  }
  return out;
}

std::string ConfigReference() {
  std::ostringstream md;
  std::string section = "-";
  for (const auto& k : ConfigKeys()) {
    const std::string s = Parent(k.path);
    if (s != section) {
      section = s;
      md << (md.tellp() > 0 ? "\n" : "") << "### " << s << "\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    // A '|' inside a cell would end it.
    auto cell = [](std::string v) {
      for (size_t at = v.find('|'); at != std::string::npos; at = v.find('|', at + 2)) v.replace(at, 1, "\\|");
      return v;
    };
    std::string name = "`" + Last(k.path) + "`";
    for (const auto& alias : k.aliases) name += " (`" + alias + "`)";
    const std::string meaning = k.ignored.empty() ? k.meaning : "ignored: " + k.ignored;
    md << "| " << name << " | " << cell(k.type) << " | `" << cell(k.default_value) << "` | " << cell(meaning) << " |\n";
  }
  return md.str();
}

}  // namespace scdino::run
