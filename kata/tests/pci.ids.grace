#
#	List of PCI ID's
#
#	Version: 2025.06.09
#
# An excerpt of Debian 13's pci.ids (package pci.ids 0.0~2025.06.09-1, /usr/share/misc/pci.ids):
# the lines of the NVIDIA models kata's tests name, Grace Hopper (GH200) and Grace Blackwell
# (GB200) among them, which Debian 12's pci.ids (2023.04.10) does not have. Input of
# test_kata_sku_grace (kata/tests/meson.build). pci.ids is licensed GPL-2.0-or-later or BSD-3-Clause.
#
10de  NVIDIA Corporation
	1af1  GA100 [A100 NVSwitch]
	20b0  GA100 [A100 SXM4 40GB]
	22a3  GH100 [H100 NVSwitch]
	2330  GH100 [H100 SXM5 80GB]
	2335  GH100 [H200 SXM 141GB]
	2342  GH100 [GH200 120GB / 480GB]
	2348  GH100 [GH200 144G HBM3e]
	2901  GB100 [B200]
	2941  GB100 [HGX GB200]
10df  Emulex Corporation
