// What a run reads: the indexed data set of its config, the channel
// statistics of that data set (read when they are for it, else computed by
// rank 0 while the other ranks wait), classes.json, and the multi-crop
// source the trainer steps on.
#pragma once

#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <string>

#include "common/status.h"
#include "data/dataset.h"
#include "data/batch_source.h"
#include "data/packed.h"
#include "data/stats.h"
#include "config/config.h"
#include "launch/coordinator.h"
#include "plan/recipe.h"

namespace scdino::run {

/// What the config says of its data, for the data layer (data::DataSource):
/// scdino.data_source, scdino.index_csv, meta.dataset_dir and
/// folder_depth_for_labels, scdino.on_bad_image, and the node-local staging
/// folder $SCDINO_STAGE_DIR read through `env`.
data::DataSource DataSourceOf(const RunConfig& config,
                              const std::function<const char*(const char*)>& env = ::getenv);

/// The indexed data set of the config's source (data::OpenDataset: a
/// folder or csv data source, or a packed set, its staged copy when one is
/// verified: Dataset::packed, read by index; bad files listed in
/// Dataset::skipped under on_bad_image: skip); an empty one for the
/// synthetic source (its images are made in memory). A process indexes once (a walk of a large
/// folder tree takes minutes on a parallel file system) and hands the
/// index to every stage: the recipe, the statistics, the source, the
/// learning check, the features. A folder's walk reports its progress
/// (common/progress.h) with its lines on `progress` (null: none, e.g. on
/// ranks other than 0).
StatusOr<data::Dataset> IndexDataset(const RunConfig& config, std::ostream* progress = &std::cerr);

/// What statistics are for: the data set's files (relative to its root), the
/// channel selection and the preprocessing before them.
std::string DatasetFingerprint(const data::Dataset& d, const data::ImagePrep& prep);

/// Checks the channel selection against the data set's first readable image
/// before any work starts; InvalidArgument names the image, its channel count
/// and the selection.
Status CheckChannels(const data::Dataset& d, const data::ImagePrep& prep);

/// Every combination of meta.selected_channel_combination_per_run (or,
/// with `only_trained`, the one this run trains) against the channel count
/// of the data set's first readable image (data::ProbeFirstImage):
/// InvalidArgument naming the entry, the channel it selects, the image and
/// its channel count. NotFound when none of the first images reads (not
/// visible here; for a service, the loader's business under
/// on_bad_image); OK when the data set is empty.
Status CheckCombinations(const RunConfig& config, const data::FirstImage& first, bool only_trained);

/// The data set's first image, found without indexing it all (a folder's
/// walk stops at the first image file; a CSV's rows; a packed set's index),
/// as a one-entry data set for CheckCombinations before anything queues
/// (`scdino-config check`); an empty one for the synthetic source. NotFound
/// when the data is not where the config says.
StatusOr<data::Dataset> FirstImageOf(const RunConfig& config);

/// Channel statistics from config.stats_path() when they are for this data
/// set and channels; else computed and written there. A stale file in the run
/// directory is recomputed (and the log says why); one the user named
/// (scdino.stats_file) is refused instead, naming what differs. With several
/// ranks, rank 0 computes and the others wait and read. With several channel
/// combinations one file serves them all (scdino.stats_file too): over
/// every channel they use, computed by the first run of the file (the others
/// wait on its lock and read it), each run given its own channels out of it.
/// `should_stop` is checked before each image: Aborted, nothing written.
StatusOr<data::ChannelStats> LoadOrComputeStats(const RunConfig& config, const data::Dataset& dataset,
                                                const data::ImagePrep& prep, Coordinator& coordinator,
                                                const std::function<bool()>& should_stop = {});

/// The same, computed afresh whatever the file holds (scdino-stats): the old
/// file is replaced under the shared file's lock, never removed while
/// another combination's run may be reading or computing it.
StatusOr<data::ChannelStats> RecomputeStats(const RunConfig& config, const data::Dataset& dataset,
                                            const data::ImagePrep& prep, Coordinator& coordinator);

/// The data's shape for the recipe and the checks of plan/recipe.h: the
/// number of images of `dataset` (IndexDataset) and the size (after
/// center_crop) and channels of its first readable one (`first`:
/// data::ProbeFirstImage with the config's image_prep), with the global
/// batch of `ranks`. The probe's refusal or read failure when it has no
/// prepared image.
StatusOr<DataShape> MeasureData(const RunConfig& config, const data::Dataset& dataset,
                                const data::FirstImage& first, int64_t ranks);

/// DataShape::hflip_distance and vflip_distance of `shape`: up to 256
/// images against up to 1,024 others of `dataset` (a sample seeded by
/// meta.seed, each prepared as for training and area-resized to at most
/// 32 x 32 px at the first image's aspect), the median distance of each
/// flipped image to its nearest other image over that of the image itself.
/// Left at 0 (not measured) for the synthetic source and below 64 images;
/// unreadable images are left out of the sample (and it is not measured
/// where half of it cannot be read). `should_stop` is checked
/// before each image: Aborted.
Status MeasureFlips(const RunConfig& config, const data::Dataset& dataset, DataShape* shape,
                    const std::function<bool()>& should_stop = {});

/// The multi-crop source of the trainer on `device`, sharded for the
/// coordinator's rank: in memory for synthetic data, else the threaded file
/// loader of `dataset` (IndexDataset; after the statistics, and
/// classes.json written by rank 0). The channel selection against the
/// images is the plan's check (ResolvePlan reads the first image once); a
/// caller without a plan makes it first (CheckChannels).
StatusOr<std::unique_ptr<data::MultiCropSource>> MakeSource(const RunConfig& config, data::Dataset dataset,
                                                            Coordinator& coordinator, torch::Device device,
                                                            const std::function<bool()>& should_stop = {});

}  // namespace scdino::run
