"""TensorBoard files of trials: where they live in checkpoint storage (layout), how the Core API
writes metrics as event files (event_file) and uploads a directory of them (uploader), and how a
TensorBoard task brings them back down (fetcher)."""
