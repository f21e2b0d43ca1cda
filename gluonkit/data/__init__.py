"""Datasets and loaders: the embedded digits and shapes, bucketing by shape, multi-scale batches."""
from ._sampling import DataLoader
from .buckets import BucketBatchify, BucketPad, Buckets, BucketSampler, bucket_loader
from .digits import digits
from .shapes import ShapesDetection
from .multiscale import MultiScaleDataset, MultiScaleSampler, multiscale_loader, resize_first

__all__ = ["digits", "ShapesDetection", "Buckets", "BucketSampler", "BucketPad", "BucketBatchify",
           "bucket_loader", "DataLoader", "MultiScaleSampler", "MultiScaleDataset", "multiscale_loader", "resize_first"]
