"""Files that come with a run: uploaded ahead through a presigned S3 PUT (`POST /v1/uploads`) or sent
inline, copied under the run as it starts (so a replay reproduces exactly what the run saw), hashed,
their content types sniffed from the bytes, and shown to the model as image parts, extracted text or a
description it can read further with `attachment_read`.

Keys: `tenants/{tenant}/uploads/{upload_id}` (an upload, until it is used or its lifecycle rule ends
it) and `tenants/{tenant}/runs/{run_id}/attachments/{attachment_id}` (the run's copy), with the text
derived from it (`….txt`) beside it. Every object carries the retention tag its lifecycle rule reads.
"""
