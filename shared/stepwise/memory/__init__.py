"""Long-term memory per end user: what an agent saved about one user of one tenant, recalled in that
user's later runs and never in anyone else's.

Every memory is owned by (tenant, agent, user): the tenant from the API key, the agent and the user
from the run (its `user_id`), never from the model. Search is lexical (BM25, stepwise.memory.bm25), and
hybrid (BM25 fused with embedding similarity) when STEPWISE_EMBEDDING_MODEL names a litellm embedding
model. Each user holds at most MAX_PER_USER memories: past that, memory_save is refused with
`memory_full` (nothing is evicted behind the user's back) until something is deleted.
"""
