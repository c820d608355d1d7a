"""Bare-metal GPU hosts: the Ansible inventory a stack's pools become, and `invoke metal`'s playbook runs."""
