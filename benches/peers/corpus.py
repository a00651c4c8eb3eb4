"""The peers benchmark's corpus: vote event `i` of a corpus over `projects` projects. Every vote
names a new item, with two reviewers (the common case of a review frontend, and the worst for
judge quality, which keeps every voted item). run.py produces it to the broker; run as a script,
this writes it as a `jurystream replay` file, each line a `jury.votes` record, so the core alone
can be measured on the same votes:

    python3 benches/peers/corpus.py 300000 10000 > votes.jsonl
    target/release/jurystream replay --input votes.jsonl --output /dev/null
"""

import sys


def key(i, projects):
    """Event `i`'s project id, which keys it."""
    return f"proj-{i % projects:06}"


def event(i, projects):
    return (
        f'{{"event_id":"ev-{i:010}","project_id":"{key(i, projects)}",'
        f'"occurred_at":{1_795_168_800_000 + i},"item_id":"trace-{i:08}",'
        f'"votes":[{{"voter_id":"u-{i % 1000:04}","verdict":"pass","reputation":0.9}},'
        f'{{"voter_id":"u-8","value":0.75}}]}}'
    )


def main():
    events = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
    projects = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    for i in range(events):
        record = f'{{"topic":"jury.votes","key":"{key(i, projects)}","value":{event(i, projects)}}}'
        sys.stdout.write(record + "\n")


if __name__ == "__main__":
    main()
