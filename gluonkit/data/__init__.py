"""Datasets and loaders: the embedded digits and shapes, bucketing by shape, multi-scale batches,
per-sample seeds, global batches that any number of workers share, and checked readers of VOC folders, COCO files and RecordIO files."""
from ._sampling import DataLoader
from .coco import COCOFile, coco_result_ids, load_coco
from .buckets import BucketBatchify, BucketPad, Buckets, BucketSampler, bucket_loader
from .digits import digits
from .global_batches import GlobalBatchSampler, global_loader
from .errors import DataFileError
from .records import class_labels, detection_labels, read_labels
from .shapes import ShapesDetection
from .multiscale import MultiScaleDataset, MultiScaleSampler, multiscale_loader, resize_first
from .seeding import SeededDataset, SeededSamples, sample_generators, seeded_loader
from .voc import VOCFolder, load_voc, read_annotation

__all__ = ["digits", "ShapesDetection", "Buckets", "BucketSampler", "BucketPad", "BucketBatchify",
           "bucket_loader", "DataLoader", "MultiScaleSampler", "MultiScaleDataset", "multiscale_loader",
           "resize_first", "SeededSamples", "SeededDataset", "seeded_loader", "sample_generators",
           "GlobalBatchSampler", "global_loader", "DataFileError", "read_labels", "class_labels", "detection_labels", "VOCFolder",
           "load_voc", "read_annotation", "COCOFile", "load_coco", "coco_result_ids"]
