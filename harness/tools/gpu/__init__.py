"""A CUDA row measured on a GPU machine that comes with torch and no package registry (a lent GPU, a
cluster node, a vendor container), in steps that each fit a short loan (`python -m harness gpu -h`):

    wheels     here, with a registry: the row's Lightning pins and the session's tools as wheels to carry
    preflight  there, at most 90 s: GO or NO-GO with reasons, before any row is measured
    row        there: the session's cases within a budget of seconds, progress as it goes, a summary even
               when cut off
    alone      there, later: cells of the row run again each in a fresh process, against the row
    cpu-cells  there, later: the row's CPU session on that machine, against the committed CPU row
"""
